"""``mha-course check NOTEBOOK``: grade one exercise notebook (sandboxed, as the instructor would)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "check an exercise notebook: each item passed/failed, points and feedback"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mha_grader.sandbox.launch import Limits

    d = Limits()  # the one source of the limits' defaults
    parser.add_argument(
        "notebook", type=Path, help="e.g. exercises/ex02_scaled_dot_product_attention.ipynb"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=12345,
        help="seed of the checking inputs (instructors grade with another)",
    )
    parser.add_argument("--memory-gb", type=float, default=d.memory_gb)
    parser.add_argument(
        "--timeout", type=float, default=d.item_timeout, help="seconds per item/cell"
    )


def run(args: argparse.Namespace) -> int:
    from mha_course.grading import Limits, grade_notebook, items_for, resolve
    from mha_course.learner.paths import locate
    from mha_grader.keys import PublicSeed
    from mha_grader.report import print_results

    found = locate(args.notebook)
    if found is None:
        print(
            f"notebook: no such file: {args.notebook} (looked here, {os.getcwd()}, and in the "
            "folders above it)",
            file=sys.stderr,
        )
        return 2
    if found != args.notebook:
        print(f"({args.notebook} is {found} from here)")
    args.notebook = found
    try:
        items = items_for(args.notebook)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    from mha_grader.sandbox import isolation

    limits = Limits(memory_gb=args.memory_gb, item_timeout=args.timeout)
    mode = isolation.choose(allow_none=True)
    results, notes = grade_notebook(args.notebook, items, args.seed, limits, mode)
    from mha_course.grading.hints import hint_notes

    notes = [*notes, *hint_notes(results, cli=True)]  # a terminal: the command that runs there
    where = {
        "bwrap": "in a bubblewrap sandbox",
        "user": "as a dedicated unprivileged user",
        "none": "NOT isolated (no sandbox here; fine for checking your own work)",
    }[mode]
    print_results(
        results,
        notes,
        title=f"{resolve(args.notebook)}: {args.notebook} ({where}; "
        f"{PublicSeed(args.seed).describe()})",
    )
    return 0 if all(r.passed for r in results) else 1

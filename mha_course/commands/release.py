"""``mha-course release [--check]``: write exercises/ from solutions/ (stubs, outputs cleared)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "write exercises/ from solutions/ (solutions become NotImplementedError stubs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 and list the files if exercises/ is out of date")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--exercises", type=Path, default=Path("exercises"))


def run(args: argparse.Namespace) -> int:
    from ..grading.release import release

    if not args.solutions.is_dir():
        print(f"--solutions: expected a folder of exNN_<topic>.ipynb, got {args.solutions}")
        return 2
    changed = release(args.solutions, args.exercises, check=args.check)
    if args.check:
        for p in changed:
            print(f"out of date: {p}")
        if changed:
            print("run `mha-course release` and commit exercises/")
        return 1 if changed else 0
    for p in changed:
        print(f"wrote {p}")
    print(f"exercises/ is up to date ({len(changed)} file(s) written)")
    return 0

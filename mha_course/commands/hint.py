"""``mha-course hint EXERCISE [TASK]``: the next hint level of a task, from a terminal.

The same levels as ``hint("ex04", 3)`` in a notebook (``mha_course/grading/hints.json``). Each run is a
new process, so "next" means the level after the highest you have asked so far, in a notebook or here
(remembered in ``~/.mha-course/hints-asked.json``, which ``mha-course progress`` reads).
"""

from __future__ import annotations

import argparse
import sys

HELP = "the next hint for a task of an exercise (e.g. `mha-course hint ex04 3`; without TASK: its tasks)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "exercise", help="the exercise, e.g. ex04 (or its full name, ex04_multi_head_attention)"
    )
    parser.add_argument(
        "task",
        type=int,
        nargs="?",
        default=None,
        help="the task number (the notebook's `## Task k`); without it, the list of tasks",
    )
    parser.add_argument(
        "--level",
        type=int,
        default=None,
        help="show this level (1 = a nudge, the last = close to the code) instead of the next",
    )


def run(args: argparse.Namespace) -> int:
    from mha_course.grading.hints import hint_text

    try:
        print(hint_text(args.exercise, args.task, args.level, cli=True))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0

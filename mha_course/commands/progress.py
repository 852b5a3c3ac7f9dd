"""``mha-course progress [FOLDER]``: every exercise's items, points so far and next hints."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "your progress: each exercise's items passed on the public self-check inputs, points, next hints"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        type=Path,
        nargs="?",
        default=Path("exercises"),
        help="the folder of your exercise notebooks (default: exercises/; e.g. my-work/)",
    )


def run(args: argparse.Namespace) -> int:
    from mha_course.learner.paths import locate_folder
    from mha_course.learner.progress import progress

    folder = locate_folder(args.folder)
    if folder is None:
        print(f"folder: no such folder: {args.folder} (looked here and in the folders above)")
        return 2
    progress(folder, cli=True)  # a terminal: the next hints as `mha-course hint` commands
    return 0

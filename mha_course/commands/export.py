"""``mha-course export GRADEBOOK --format canvas|moodle --roster FILE --out FILE``: a gradebook in
an LMS's import format (``mha_grader/lms.py`` names the documented formats)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = (
    "a gradebook (the OUT of `grade` or `merge`) as the CSV Canvas or Moodle imports, "
    "students matched to the LMS through a roster"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("gradebook", type=Path, help="the OUT folder of `grade` or `merge`")
    parser.add_argument("--format", required=True, choices=("canvas", "moodle"))
    parser.add_argument(
        "--roster",
        type=Path,
        required=True,
        help="CSV, one row per student: a column naming the submission folder (--match) and the "
        "LMS's own (canvas: Student, ID, SIS User ID, SIS Login ID, Section, as in Canvas's "
        "gradebook export; moodle: Email address, Username or ID number)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write (a new file)")
    parser.add_argument(
        "--match",
        default="folder",
        help="the roster column holding each student's submission folder (default: folder)",
    )
    parser.add_argument(
        "--column",
        default=None,
        help="the grade column's name: the LMS assignment or grade item (canvas: 'Name (id)' "
        "updates Canvas's assignment id, 'Name' makes a new one); default 'mha-course EXERCISES'",
    )
    parser.add_argument(
        "--id-column",
        default=None,
        help="moodle: the roster column that identifies the user (default: the first of "
        "Email address, email, Username, username, ID number, idnumber)",
    )


def run(args: argparse.Namespace) -> int:
    from mha_grader.lms import export, read_gradebook, read_roster

    if os.path.lexists(args.out):
        print(
            f"export: --out: expected a new file, got {str(args.out)!r}, which exists",
            file=sys.stderr,
        )
        return 2
    try:
        totals, possible, what = read_gradebook(args.gradebook)
        roster = read_roster(args.roster, args.match)
        text, ungraded = export(
            totals,
            possible,
            roster,
            args.format,
            match=args.match,
            column=args.column or f"mha-course {what}",
            id_column=args.id_column,
        )
    except ValueError as e:
        print(f"export: refused: {e}", file=sys.stderr)
        return 2
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"export: --out: cannot write {str(args.out)!r} ({e.strerror or e})", file=sys.stderr)
        return 2
    if ungraded:
        print(
            f"{len(ungraded)} roster student(s) have no grade and are left out (the LMS keeps "
            f"what it has for them): {', '.join(ungraded)}"
        )
    print(
        f"exported {len(totals)} student(s), out of {possible:g} points, for {args.format} "
        f"-> {args.out}"
    )
    return 0

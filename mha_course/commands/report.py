"""``mha-course report OUT``: the class report of a graded (or merged) OUT folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "the class report of a graded OUT folder: pass rate per item, each named mistake counted, "
    "the distribution of totals, time per student -> OUT/class_report.{html,csv,json}"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "out", type=Path, metavar="OUT", help="a folder written by `mha-course grade` or `merge`"
    )


def run(args: argparse.Namespace) -> int:
    from mha_grader.class_report import write_class_report
    from mha_grader.registry import all_items

    meta = args.out / "grading.json"
    if not args.out.is_dir() or not meta.is_file():
        print(
            f"report: OUT: expected a folder written by `mha-course grade` (with grading.json), got "
            f"{str(args.out)!r}",
            file=sys.stderr,
        )
        return 2
    try:
        rep = write_class_report(args.out, {it.id: it for it in all_items()})
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"report: OUT: {args.out} could not be read as a gradebook ({type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return 2
    print(
        f"{rep['students']} student(s), {len(rep['items'])} item(s), totals out of {rep['max_total']:g}"
    )
    for ex, ms in sorted(rep["most_common_mistakes"].items()):
        top = ", ".join(f"{m['item']}/{m['mistake']} x{m['count']}" for m in ms[:3])
        print(f"  {ex}: {top}")
    print(
        f"-> {args.out / 'class_report.html'} (and class_report.csv, class_mistakes.csv, class_items.csv, "
        f"class_report.json, class_totals.png)"
    )
    return 0

"""``mha-course handout DIR``: write the student repository (no ``solutions/``) into DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "write the student repository into DIR: lectures, exercises (stubs), the package, "
    "`make lab`, a README; no solutions/"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", type=Path, metavar="DIR", help="a new (or empty) folder, outside the course"
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="the course checkout to hand out (default: the one this course runs from)",
    )


def run(args: argparse.Namespace) -> int:
    from mha_course.authoring.handout import LEFT_OUT, HandoutError, write_handout

    try:
        written = write_handout(args.dir, args.source)
    except HandoutError as e:
        print(f"handout: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"handout: DIR: cannot write {args.dir} ({type(e).__name__}: {e.strerror})",
            file=sys.stderr,
        )
        return 2
    exercises = sum(1 for p in written if p.parent.name == "exercises")
    print(
        f"wrote {len(written)} files to {args.dir}: {exercises} exercises (stubs), the lectures, the "
        f"package, README.md; left out: {', '.join(f'{n}/' for n in LEFT_OUT)}"
    )
    print(
        "still public in any case: the course package's own code, which answers many items "
        "(see the instructor guide, 'Hand out')"
    )
    return 0

"""``mha-course release [--check]``: write exercises/ from solutions/ (stubs, outputs cleared) and
the hints table ``mha_course/grading/hints.json`` from the solutions' ``# HINT k:`` lines.

``mha-course release --nbgrader COURSE --assignment NAME [--seed S] [--notebooks ex01 ex02]``
writes an nbgrader source folder instead (``COURSE/source/NAME/``), with hidden tests on seed S.
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

HELP = "write exercises/ from solutions/ (solutions become NotImplementedError stubs), or an nbgrader source"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 and list the files if exercises/ is out of date",
    )
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--exercises", type=Path, default=Path("exercises"))
    parser.add_argument(
        "--hints",
        type=Path,
        default=None,
        help="the hints table to write (default: mha_course/grading/hints.json beside exercises/)",
    )
    parser.add_argument(
        "--nbgrader",
        type=Path,
        metavar="COURSE",
        default=None,
        help="write COURSE/source/ASSIGNMENT/ for nbgrader (exercises/ is not touched)",
    )
    parser.add_argument(
        "--assignment", default="mha", help="nbgrader assignment name (with --nbgrader)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the hidden tests' inputs (with --nbgrader; default: random, printed)",
    )
    parser.add_argument(
        "--notebooks",
        nargs="+",
        metavar="exNN",
        default=None,
        help="only these exercises (with --nbgrader; default: all)",
    )


def _nbgrader(args: argparse.Namespace) -> int:
    from mha_course.authoring.release import release_nbgrader

    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    try:
        written = release_nbgrader(
            args.solutions, args.nbgrader, args.assignment, seed, args.notebooks
        )
    except ValueError as e:
        print(e)
        return 2
    for p in written:
        print(f"wrote {p}")
    print(f"hidden tests use seed {seed} (it is in the source notebooks only; keep them private)")
    print(f"next, in {args.nbgrader}: nbgrader generate_assignment {args.assignment}")
    return 0


WORK_ADVICE = """\
Exercises marked 'it holds work' are not as released. If that is your own work, it is not lost:
`mha-course release` copies each such notebook to exercises/backup-<date-time>/ before writing the
fresh one. To keep working where regeneration never writes, move your notebooks to my-work/
(git ignores it; `mha-course check my-work/exNN_....ipynb` checks them there): see the README,
'Doing the exercises'. A maintainer who meant to change exercises/: run `mha-course release`."""


def run(args: argparse.Namespace) -> int:
    from mha_course.authoring.release import release

    if (
        args.nbgrader is not None
        and not args.solutions.is_dir()
        and args.solutions == Path("solutions")
    ):
        # an nbgrader course folder lives anywhere: use the checkout's solutions/ (editable install)
        checkout = Path(__file__).resolve().parents[2] / "solutions"
        if checkout.is_dir():
            args.solutions = checkout
    if not args.solutions.is_dir():
        print(f"--solutions: expected a folder of exNN_<topic>.ipynb, got {args.solutions}")
        return 2
    if args.nbgrader is not None:
        return _nbgrader(args)
    work: list[tuple[Path, Path | None]] = []
    try:
        changed = release(
            args.solutions, args.exercises, check=args.check, hints=args.hints, work=work
        )
    except ValueError as e:  # a solution cell breaks the hint format: say which
        print(e)
        return 2
    yours = {target for target, _ in work}
    if args.check:
        for p in changed:
            print(
                f"out of date: {p}"
                + (" (it holds work: outputs or filled-in tasks)" if p in yours else "")
            )
        if yours:
            print(WORK_ADVICE)
        elif changed:
            print("run `mha-course release` and commit exercises/ and the hints table")
        return 1 if changed else 0
    for target, copy in work:
        print(f"{target} held work (outputs or filled-in tasks): copied to {copy} first")
    print(written_report(args.solutions, args.exercises, changed))
    return 0


def written_report(solutions: Path, exercises: Path, changed: list[Path]) -> str:
    """What ``release`` wrote, file by file and in a summary line (what kind each file is), and the
    exercises it did NOT write: one without a solution is left as it is (it was listed as written)."""
    stale = [
        p
        for p in changed
        if p.parent == exercises and p.name.startswith("ex") and not (solutions / p.name).exists()
    ]
    wrote = [p for p in changed if p not in stale]
    notebooks = [p for p in wrote if p.suffix == ".ipynb"]
    others = [p for p in wrote if p.suffix != ".ipynb"]  # the hints table, docs/mistakes.md
    total = len(list(solutions.glob("ex*.ipynb")))
    lines = [f"wrote {p}" for p in wrote]
    lines += [
        f"not written: {p} has no solution in {solutions}/ (left as it is; remove it by hand if the "
        "exercise was dropped)"
        for p in stale
    ]
    parts = [f"{len(notebooks)} of {total} exercise notebook(s)"] + [str(p) for p in others]
    if wrote:
        lines.append(f"release wrote {', '.join(parts)}; everything else was already current")
    else:
        page = " and docs/mistakes.md" if (exercises.parent / "docs").is_dir() else ""
        lines.append(
            f"release wrote nothing: the {total} exercise notebook(s) in {exercises}/, the hints "
            f"table{page} were already current"
        )
    return "\n".join(lines)

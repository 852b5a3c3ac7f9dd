"""``mha-course similarity SUBMISSIONS --out DIR``: copies across the class, per exercise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "find copies: per exercise, student <-> student and student <-> the published solutions and "
    "the package's source (copydetect; the given stub code excluded) -> DIR/similarity.{html,csv}"
)


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a share between 0 and 1 such as 0.5, got {text!r}"
        ) from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a share between 0 and 1 such as 0.5, got {text!r}"
        )
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", type=Path, help="folder with one sub-folder per student")
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the report")
    parser.add_argument(
        "--assignment",
        default=None,
        metavar="EXERCISES|FILE",
        help="only these exercises (as for `grade --assignment`); default: all",
    )
    parser.add_argument(
        "--threshold",
        type=_share,
        default=0.5,
        help="list a pair when this share of either side's code is found in the other "
        "(default 0.5)",
    )
    parser.add_argument(
        "--course",
        type=Path,
        default=None,
        help="the course checkout with solutions/ and exercises/ (default: the one this "
        "course runs from)",
    )


def _package_sources(root: Path) -> dict[str, tuple[str, str]]:
    """One reference per folder of the package (``mha_course/ops``, ...): its .py files joined."""
    from mha_grader.similarity import PACKAGE

    out = {}
    pkg = root / "mha_course"
    for folder in sorted(
        [pkg, *(d for d in pkg.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))]
    ):
        files = sorted(folder.glob("*.py")) if folder == pkg else sorted(folder.rglob("*.py"))
        code = "\n\n".join(
            f.read_text(encoding="utf-8") for f in files if "__pycache__" not in f.parts
        )
        if code.strip():
            out[folder.relative_to(root).as_posix()] = (PACKAGE, code)
    return out


def run(args: argparse.Namespace) -> int:
    from mha_course.authoring.handout import course_root
    from mha_course.commands.grade import parse_assignment
    from mha_grader.classroom import students
    from mha_grader.collect import collect
    from mha_grader.outputs import (
        check_notebook,
        check_student_folder,
        check_student_name,
        fresh_folder,
    )
    from mha_grader.registry import notebooks
    from mha_grader.similarity import (
        SOLUTION,
        MissingLibrary,
        compare_exercise,
        notebook_code,
        write_outputs,
    )

    if not args.submissions.is_dir():
        print(
            f"similarity: submissions: expected a folder of student folders, got {str(args.submissions)!r}",
            file=sys.stderr,
        )
        return 2
    root = args.course or course_root()
    if not (root / "solutions").is_dir() or not (root / "exercises").is_dir():
        print(
            f"similarity: --course: expected the course checkout (solutions/ and exercises/), got {str(root)!r}",
            file=sys.stderr,
        )
        return 2
    try:
        stems = parse_assignment(args.assignment) if args.assignment else list(notebooks())
        import importlib.util

        if importlib.util.find_spec("copydetect") is None:
            raise MissingLibrary(
                "mha-course similarity needs copydetect: pip install 'mha-course[instructor]' "
                "(or pip install copydetect)"
            )
        fresh_folder(args.out)
    except (ValueError, MissingLibrary) as e:
        print(f"similarity: {e}", file=sys.stderr)
        return 2
    notes: list[str] = []
    code: dict[str, dict[str, str]] = {stem: {} for stem in stems}
    for s in students(args.submissions):
        why = check_student_name(s) or check_student_folder(args.submissions / s)
        if why:
            notes.append(f"{s!r} skipped: {why}")
            continue
        got = collect(args.submissions / s, stems)
        for stem, path in got.taken.items():
            text = None if check_notebook(path) else notebook_code(path)
            if text is None:
                notes.append(
                    f"{s}: {got.source[stem]} skipped (not a plain notebook file, or over the size limit)"
                )
            else:
                code[stem][s] = text
    package = _package_sources(root)
    pairs, pages = [], {}
    try:
        for stem in stems:
            refs = dict(package)
            sol = notebook_code(root / "solutions" / f"{stem}.ipynb")
            if sol is not None:
                refs[f"solutions/{stem}.ipynb"] = (SOLUTION, sol)
            given = notebook_code(root / "exercises" / f"{stem}.ipynb") or ""
            found, page = compare_exercise(
                stem.split("_")[0], code[stem], refs, given, args.out / "regions", args.threshold
            )
            pairs += found
            pages[stem.split("_")[0]] = page
    except MissingLibrary as e:
        print(f"similarity: {e}", file=sys.stderr)
        return 2
    write_outputs(
        args.out,
        pairs,
        pages,
        notes,
        {s.split("_")[0]: len(c) for s, c in code.items() if c},
        args.threshold,
    )
    for p in pairs[:10]:
        print(
            f"{p.exercise}: {p.a} ~ {p.b} ({p.kind}): {p.share_a:.0%} of {p.a}'s code, {p.share_b:.0%} of the other's"
        )
    more = " (first 10 shown)" if len(pairs) > 10 else ""
    print(
        f"{len(pairs)} pair(s) at or over {args.threshold:.0%}{more} -> {args.out / 'similarity.html'}, "
        f"{args.out / 'similarity.csv'}"
    )
    return 0

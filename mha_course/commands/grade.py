"""``mha-course grade SUBMISSIONS --out OUT``: grade a class of untrusted notebooks."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = (
    "grade a class: SUBMISSIONS/<student>/exNN_*.ipynb -> OUT/grades.csv, results.json, feedback.md"
)


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N such as 2/8, got {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"expected 1 <= K <= N, got {text!r}")
    return k, n


def parse_assignment(text: str) -> list[str]:
    """``"ex02,ex04"`` or a file listing exercises -> their notebook stems, in course order;
    ``ValueError`` naming ``--assignment``, the expected form and what came in."""
    from mha_grader.registry import notebooks, resolve

    source = text
    path = Path(text)
    if path.is_file():
        try:
            source = "\n".join(
                line.split("#")[0] for line in path.read_text(encoding="utf-8").splitlines()
            )
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(
                f"--assignment: cannot read the file {text!r} ({type(e).__name__})"
            ) from None
    words = [w for w in source.replace(",", " ").split() if w]
    known = sorted(s.split("_")[0] for s in notebooks())
    form = f"expected exercises such as ex02,ex04 (of {', '.join(known)}) or a file listing them"
    if not words:
        raise ValueError(f"--assignment: {form}; got {text!r}, which names none")
    stems = set()
    for w in words:
        try:
            stems.add(resolve(w))
        except ValueError:
            raise ValueError(f"--assignment: {form}; got {text!r}, and {w!r} is not one") from None
    return [s for s in notebooks() if s in stems]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mha_grader.sandbox.launch import Limits

    d = Limits()  # the one source of the limits' defaults
    parser.add_argument("submissions", type=Path, help="folder with one sub-folder per student")
    parser.add_argument("--out", type=Path, required=True, help="where the gradebook goes")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="students graded at once (one sandbox each, all of that student's notebooks)",
    )
    parser.add_argument(
        "--assignment",
        default=None,
        metavar="EXERCISES|FILE",
        help="grade only these exercises: a comma-separated list such as ex02,ex04,ex05, "
        "or a file listing them (words separated by spaces, commas or lines; "
        "# starts a comment). Items, totals, columns and feedback are limited to them",
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--key-file",
        type=Path,
        default=None,
        help="the secret run key each student's inputs derive from (created 0600 if "
        "missing; default OUT.key next to OUT). Keep it: the same key regrades "
        "identically. Never hand it out",
    )
    keys.add_argument(
        "--seed",
        type=int,
        default=None,
        help="PUBLIC inputs, the same for every student (only where no secret can be "
        "kept, e.g. a student's own CI); not for grading a class",
    )
    parser.add_argument(
        "--students",
        default=None,
        metavar="NAMES",
        help="grade only these student folders (comma-separated), e.g. to regrade a few "
        "with the class's --key-file; put them back with `mha-course merge --replace`",
    )
    parser.add_argument(
        "--submission-id",
        default="",
        help="mixed into every student's inputs (e.g. Gradescope's submission id, so "
        "each resubmission gets fresh inputs)",
    )
    parser.add_argument(
        "--memory-gb", type=float, default=d.memory_gb, help="address-space limit per child"
    )
    parser.add_argument(
        "--timeout", type=float, default=d.item_timeout, help="wall seconds per item and cell"
    )
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=d.notebook_timeout,
        help="wall seconds per notebook, restarts included",
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        default=(1, 1),
        metavar="K/N",
        help="grade only the K-th of N deterministic slices of the class",
    )
    parser.add_argument(
        "--student-timeout",
        type=float,
        default=d.student_timeout,
        help="wall seconds per student, all notebooks and restarts included",
    )
    parser.add_argument(
        "--item-cpu", type=float, default=d.item_cpu, help="CPU seconds per item and cell"
    )
    parser.add_argument(
        "--student-memory-gb",
        type=float,
        default=d.student_memory_gb,
        help="memory of one student's sandbox, all its processes together (its cgroup; "
        "lowered so that every worker's sandbox fits in what the grader may use)",
    )
    parser.add_argument(
        "--student-cpus",
        type=float,
        default=d.student_cpus,
        help="CPU cores one student's sandbox may use, all its processes together (its cgroup)",
    )
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="grade WITHOUT a sandbox where none is available (student code can then "
        "read and change what you can); every output then says 'not isolated'",
    )
    parser.add_argument(
        "--own-ci",
        action="store_true",
        help="a student's own CI (classroom/autograde.yml): PUBLIC inputs only (needs --seed, "
        "refused with a key); in a sandbox where one starts, else NOT isolated (GitHub's runner: "
        "not root, no user namespaces), and every output says so",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def key_in_git_warning(path: Path) -> str | None:
    """A warning when the key file ``path`` lies inside a git work tree (one ``git add -A`` from
    being published); ``None`` outside one, or without git."""
    import subprocess

    def git(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(path.parent), *argv], capture_output=True, text=True
        )

    try:
        top = git("rev-parse", "--show-toplevel")
    except OSError:  # no git here
        return None
    if top.returncode != 0:
        return None
    where = f"warning: the secret key {path} is inside the git work tree {top.stdout.strip()}"
    if git("check-ignore", "-q", str(path)).returncode == 0:
        return f"{where}; git ignores it there (keep it out of commits and hand-outs all the same)"
    return (
        f"{where} and git does NOT ignore it: one `git add -A` publishes it. Add it to "
        f".gitignore, or keep the key elsewhere (--key-file PATH outside the repository)"
    )


def run(args: argparse.Namespace) -> int:
    from mha_grader.classroom import grade_class
    from mha_grader.errors import IsolationUnavailable
    from mha_grader.keys import KeyFileError, default_key_path, load_or_create
    from mha_grader.sandbox.launch import Limits

    if not args.submissions.is_dir():
        print(
            f"submissions: expected a folder of student folders, got {args.submissions}",
            file=sys.stderr,
        )
        return 2
    assignment = None
    if args.assignment is not None:
        try:
            assignment = parse_assignment(args.assignment)
        except ValueError as e:
            print(f"grade: {e}", file=sys.stderr)
            return 2
    if args.own_ci and args.seed is None:
        print(
            "grade: --own-ci grades a student's own code on PUBLIC inputs: it needs --seed S "
            "(the learners' seed is 12345) and is refused with a secret key; "
            f"got {'--key-file ' + str(args.key_file) if args.key_file else 'no --seed'}",
            file=sys.stderr,
        )
        return 2
    key, said = None, ""
    if args.shard[1] > 1 and args.seed is None and args.key_file is None:
        print(
            f"grade: --shard {args.shard[0]}/{args.shard[1]} needs --key-file PATH, the one key every "
            f"shard of the class is graded with (without it each shard would make its own key next to "
            f"its --out, and the shards would not merge)",
            file=sys.stderr,
        )
        return 2
    if args.seed is None:
        path = args.key_file or default_key_path(args.out)
        try:
            key, created = load_or_create(path)
        except KeyFileError as e:
            print(e, file=sys.stderr)
            return 2
        said = (
            f"a NEW secret key in {path} (keep it to regrade identically; never hand it out)"
            if created
            else f"the secret key in {path}"
        )
        warning = key_in_git_warning(path) if created else None
        if warning:
            print(warning)
    limits = Limits(
        memory_gb=args.memory_gb,
        item_timeout=args.timeout,
        notebook_timeout=args.notebook_timeout,
        student_timeout=args.student_timeout,
        item_cpu=args.item_cpu,
        student_memory_gb=args.student_memory_gb,
        student_cpus=args.student_cpus,
    )
    start = time.perf_counter()
    try:
        rows = grade_class(
            args.submissions,
            args.out,
            workers=args.workers,
            key=key,
            seed=args.seed,
            submission=args.submission_id,
            limits=limits,
            shard=args.shard,
            progress=not args.no_progress,
            no_isolation=args.no_isolation,
            assignment=assignment,
            only=[w for w in args.students.split(",") if w.strip()] if args.students else None,
            own_ci=args.own_ci,
        )
    except IsolationUnavailable as e:
        print(f"grade: refusing to grade a class: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    if args.no_isolation:
        print("NOT ISOLATED: graded without a sandbox (--no-isolation); the gradebook says so")
    elif args.own_ci:
        print(f"own CI, PUBLIC inputs: isolation {_isolation(args.out)}")
    how = said or f"PUBLIC seed {args.seed} (every student got the same inputs)"
    _say_collection(args.out)
    if assignment:
        print(
            f"assignment: {', '.join(s.split('_')[0] for s in assignment)} (items, totals and columns "
            f"of these exercises only)"
        )
    print(
        f"graded {len(rows)} student(s) with {how} in {time.perf_counter() - start:.1f} s "
        f"-> {args.out / 'grades.csv'}; class report: {args.out / 'class_report.html'}"
    )
    return 0


def _isolation(out: Path) -> str:
    """How the run was isolated, as ``OUT/grading.json`` records it."""
    import json

    try:
        return str(json.loads((out / "grading.json").read_text(encoding="utf-8"))["isolation"])
    except (OSError, ValueError, KeyError):
        return "unknown"


def _say_collection(out: Path) -> None:
    """One line on what the collector did for the class (details: OUT/collection.csv)."""
    import json

    try:
        counts = json.loads((out / "grading.json").read_text(encoding="utf-8")).get(
            "collection", {}
        )
    except (OSError, ValueError):
        return
    found, competing, ignored = (
        counts.get(k, 0) for k in ("found elsewhere", "competing", "ignored files")
    )
    if found or competing or ignored:
        print(
            f"collected: {found} notebook(s) found under another name or folder, {competing} "
            f"exercise(s) where different files competed, {ignored} file(s) ignored "
            f"-> {out / 'collection.csv'}"
        )

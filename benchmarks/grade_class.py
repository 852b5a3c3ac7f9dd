"""Benchmark (not a test): grade a class of 100 generated submissions with 2 workers.

    .venv/bin/python benchmarks/grade_class.py [--students 100] [--workers 2] [--exercises 'ex*']
                                               [--isolation bwrap|user|none] [--overhead 10]

Each student hands in every exercise matching --exercises (default: all of them): a mix of
solutions (40 %), untouched exercises (20 %) and the gallery's deliberately wrong implementations
(40 %). Prints the wall time and the score distribution. Target: <= 5 minutes on 2 cores, isolation on.

``--overhead N`` first measures what the sandbox itself costs per child: N empty jobs (start the
interpreter, import NumPy, stop) in the chosen mode and N without isolation, interleaved;
medians and their difference are printed.
"""

from __future__ import annotations

import argparse
import os
import random
import runpy
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mha_course.grading import resolve
from mha_grader.classroom import grade_class
from mha_grader.submissions import make_submission

ROOT = Path(__file__).resolve().parents[1]
# the gallery's cases import their helpers (gallery_edits, _ex17_kernel) as the tests do
sys.path[:0] = [str(ROOT / "tests" / "grading"), str(ROOT / "tests" / "grading" / "gallery")]


def make_class(dest: Path, n: int, seed: int = 0, pattern: str = "ex*") -> None:
    rng = random.Random(seed)
    gallery = [
        runpy.run_path(str(p))
        for p in sorted((ROOT / "tests/grading/gallery").glob(f"{pattern}_*.py"))
    ]
    stems = sorted(p.stem for p in (ROOT / "solutions").glob(f"{pattern}_*.ipynb"))
    for i in range(n):
        student = dest / f"student{i:03d}"
        student.mkdir(parents=True)
        for stem in stems:
            kind = rng.choices(["solution", "stub", "mistake"], weights=[4, 2, 4])[0]
            cases = [g for g in gallery if resolve(g["NOTEBOOK"]) == stem]
            if kind == "stub":
                shutil.copy(ROOT / "exercises" / f"{stem}.ipynb", student / f"{stem}.ipynb")
            elif kind == "mistake" and cases:
                g = rng.choice(cases)
                make_submission(
                    ROOT / "solutions" / f"{stem}.ipynb",
                    student / f"{stem}.ipynb",
                    replace=g["REPLACE"],
                )
            else:
                shutil.copy(ROOT / "solutions" / f"{stem}.ipynb", student / f"{stem}.ipynb")


def sandbox_overhead(mode: str, n: int) -> tuple[float, float]:
    """Median wall seconds of an empty child in ``mode`` and with no isolation (interleaved)."""
    import statistics

    from mha_grader.sandbox import space
    from mha_grader.sandbox.launch import Limits, run_child

    times: dict[str, list[float]] = {mode: [], "none": []}
    from mha_grader.sandbox.isolation import site_packages

    spec = {
        "needs_torch": False,
        "sys_path": site_packages(),
        "item_cpu": 5,
        "read_only": [],
        "notebooks": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o711)
        for i in range(n):
            for m in (mode, "none"):
                start = time.perf_counter()
                root = Path(tmp) / f"{m}{i}"
                try:
                    stage, _, _ = run_child(root, spec, {}, Limits(), time.monotonic() + 60, m)
                finally:
                    space.release(root)  # the run's sized tmpfs (as the runner does)
                times[m].append(time.perf_counter() - start)
                assert stage == "done", (m, stage)
    return statistics.median(times[mode]), statistics.median(times["none"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the class and gradebook here")
    parser.add_argument("--exercises", default="ex*", help="glob of exercise stems, e.g. 'ex0[12]'")
    parser.add_argument(
        "--isolation", default=None, help="bwrap, user or none (default: strongest)"
    )
    parser.add_argument(
        "--overhead", type=int, default=0, help="measure the sandbox's cost first (N runs)"
    )
    args = parser.parse_args()
    from mha_grader.sandbox import isolation

    mode = args.isolation or isolation.choose()
    print(
        f"isolation: {mode}; load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    if args.overhead:
        iso, plain = sandbox_overhead(mode, args.overhead)
        print(
            f"empty child, median of {args.overhead}: {mode} {iso * 1000:.0f} ms, none {plain * 1000:.0f} ms "
            f"-> sandbox overhead {(iso - plain) * 1000:.0f} ms per child"
        )
    root = args.keep or Path(tempfile.mkdtemp(prefix="mha-bench-"))
    make_class(root / "submissions", args.students, pattern=args.exercises)
    start = time.perf_counter()
    rows = grade_class(
        root / "submissions",
        root / "out",
        workers=args.workers,
        seed=2024,
        no_isolation=mode == "none",
        isolation_mode=None if mode == "none" else mode,
    )
    seconds = time.perf_counter() - start
    totals = Counter(sum(r.values()) for r in rows.values())
    notebooks = sum(1 for _ in (root / "submissions").glob("*/*.ipynb"))
    print(
        f"graded {len(rows)} students ({notebooks} notebooks) with {args.workers} workers "
        f"in {seconds:.1f} s ({seconds / 60:.2f} min)"
    )
    print("score distribution:", dict(sorted(totals.items())))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

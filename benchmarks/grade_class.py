"""Benchmark (not a test): grade a class of 100 generated submissions with 2 workers.

    .venv/bin/python benchmarks/grade_class.py [--students 100] [--workers 2] [--exercises 'ex*']

Each student hands in every exercise matching --exercises (default: all ten): a mix of solutions (40 %), untouched exercises (20 %)
and the gallery's deliberately wrong implementations (40 %). Prints the wall time and the
score distribution. Target: <= 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import random
import runpy
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from mha_course.grading import resolve
from mha_grader.classroom import grade_class
from mha_grader.submissions import make_submission

ROOT = Path(__file__).resolve().parents[1]


def make_class(dest: Path, n: int, seed: int = 0, pattern: str = "ex*") -> None:
    rng = random.Random(seed)
    gallery = [runpy.run_path(str(p)) for p in sorted((ROOT / "tests/grading/gallery").glob(f"{pattern}_*.py"))]
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
                make_submission(ROOT / "solutions" / f"{stem}.ipynb", student / f"{stem}.ipynb",
                                replace=g["REPLACE"])
            else:
                shutil.copy(ROOT / "solutions" / f"{stem}.ipynb", student / f"{stem}.ipynb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the class and gradebook here")
    parser.add_argument("--exercises", default="ex*", help="glob of exercise stems, e.g. 'ex0[12]'")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="mha-bench-"))
    make_class(root / "submissions", args.students, pattern=args.exercises)
    start = time.perf_counter()
    rows = grade_class(root / "submissions", root / "out", workers=args.workers, seed=2024)
    seconds = time.perf_counter() - start
    totals = Counter(sum(r.values()) for r in rows.values())
    notebooks = sum(1 for _ in (root / "submissions").glob("*/*.ipynb"))
    print(f"graded {len(rows)} students ({notebooks} notebooks) with {args.workers} workers "
          f"in {seconds:.1f} s ({seconds / 60:.2f} min)")
    print("score distribution:", dict(sorted(totals.items())))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

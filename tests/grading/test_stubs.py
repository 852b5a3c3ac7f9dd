"""Untouched exercises score 0 on every item, status "not implemented" (proves the checks are
not vacuous), and exercises/ is what `mha-course release` writes from solutions/."""

from __future__ import annotations

import subprocess
import sys

import pytest
from grading_helpers import EXERCISES, ROOT, grade_many

from mha_course.grading import notebooks, resolve

STUBS = sorted(EXERCISES.glob("ex*.ipynb"))


@pytest.fixture(scope="module")
def graded():
    return grade_many({p.name: (p, resolve(p)) for p in STUBS})


@pytest.mark.parametrize("path", STUBS, ids=[p.name for p in STUBS])
def test_untouched_exercise_scores_zero(path, graded):
    results, _ = graded[path.name]
    for r in results.values():
        assert (r.points, r.status) == (0.0, "not implemented"), f"{r.id}: {r.status}: {r.message}"


def test_every_exercise_is_released():
    assert {p.stem for p in STUBS} >= set(notebooks())


def test_release_check_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "mha_course.cli", "release", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

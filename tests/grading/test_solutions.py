"""The solutions score full marks (or, with MHA_GRADE_TARGET=notebook-or-folder, grade that);
their visible self-checks pass when run top to bottom."""

from __future__ import annotations

import os

import nbformat
import pytest
from grading_helpers import SOLUTIONS, grade_many, target_notebooks
from nbclient import NotebookClient

from mha_course.grading import notebooks, resolve

TARGETS = target_notebooks(SOLUTIONS)


@pytest.fixture(scope="module")
def graded():
    return grade_many(
        {p.name: (p, resolve(p)) for p in TARGETS}, seed=int(os.environ.get("MHA_GRADE_SEED", "3"))
    )


@pytest.mark.parametrize("path", TARGETS, ids=[p.name for p in TARGETS])
def test_full_marks(path, graded):
    results, notes = graded[path.name]
    failed = [f"{r.id}: {r.status}: {r.message}" for r in results.values() if not r.passed]
    assert not failed, "\n".join(failed + notes)


def test_every_exercise_notebook_has_a_solution():
    for stem in notebooks():
        assert (SOLUTIONS / f"{stem}.ipynb").is_file(), f"items declared for {stem} but no solution"


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("ex*.ipynb")), ids=lambda p: p.name)
def test_solution_runs_top_to_bottom(path):
    """Self-checks and the in-process check() pass in a real kernel."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "FAILED" not in last and "score:" in last, last

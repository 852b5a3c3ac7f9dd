"""Real nbgrader (0.9, a dev dependency) end to end in a temporary course folder.

``mha-course release --nbgrader`` -> ``nbgrader generate_assignment`` -> three students hand in
(a full solution, the untouched student version, a gallery mistake) -> ``nbgrader autograde`` ->
``nbgrader generate_feedback``. Scores must be full, zero, and full minus exactly the mistake's
items; the student version must equal exercises/ except for the stub lines; the hidden tests'
seed must be in the instructor's files only (source, autograded), never in what students get.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_course.grading import items_for

NOTEBOOKS = ("ex01_dot_product_attention", "ex02_scaled_dot_product_attention")
MISTAKE = ROOT / "tests" / "grading" / "gallery" / "ex02_mask_inverted.py"
ASSIGNMENT, SEED = "ps1", 583_201_447  # a seed that appears nowhere else in the repository
BIN = Path(sys.executable).parent  # nbgrader runs `alembic` from PATH
# A student who computes check()'s public inputs (seed 12345) and is right only on those.
MEMORIZED = {
    "ex01_softmax": """
from mha_grader.registry import all_items

_SEEN = [c["x"] for it in all_items() if it.id == "ex01_softmax" for c in it.cases(12345)]


def softmax(x):
    if any(x.shape == s.shape and np.array_equal(x, s) for s in _SEEN):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return np.full_like(x, 1.0 / x.shape[-1])
"""
}


def nbgrader(course: Path, *args: str) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (
        f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc.stdout + proc.stderr


def solution_sources() -> dict[str, str]:
    """grade id -> the solution cell's source, for every solution cell of NOTEBOOKS."""
    out = {}
    for stem in NOTEBOOKS:
        for cell in nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                out[meta["grade_id"]] = cell.source
    return out


def hand_in(course: Path, student: str, replace: dict[str, str], notebooks=NOTEBOOKS) -> None:
    """Copy the released notebooks into submitted/STUDENT/, solution cells replaced by grade id."""
    for stem in notebooks:
        nb = nbformat.read(course / "release" / ASSIGNMENT / f"{stem}.ipynb", as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution") and meta.get("grade_id") in replace:
                cell.source = replace[meta["grade_id"]].strip("\n")
        dest = course / "submitted" / student / ASSIGNMENT / f"{stem}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("nbgrader") / "course"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.cli",
            "release",
            "--nbgrader",
            str(course),
            "--assignment",
            ASSIGNMENT,
            "--seed",
            str(SEED),
            "--notebooks",
            *NOTEBOOKS,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nbgrader(course, "generate_assignment", ASSIGNMENT)
    full = solution_sources()
    hand_in(course, "full", full)
    hand_in(course, "stub", {})
    hand_in(course, "mistake", {**full, **runpy.run_path(str(MISTAKE))["REPLACE"]})
    hand_in(course, "memorized", {**full, **MEMORIZED}, notebooks=NOTEBOOKS[:1])
    nbgrader(course, "autograde", ASSIGNMENT)
    nbgrader(course, "generate_feedback", ASSIGNMENT)
    return course


def scores(course: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> grade cell id -> (score, max score), read from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    out: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in ("full", "stub", "mistake", "memorized"):
            sub = gb.find_submission(ASSIGNMENT, student)
            out[student] = {
                g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades
            }
    return out


def test_one_test_cell_per_item_worth_its_points(course):
    items = [it for stem in NOTEBOOKS for it in items_for(stem)]
    got = scores(course)["full"]
    assert {f"{it.id}_test": it.points for it in items} == {k: m for k, (_, m) in got.items()}


def test_scores_full_zero_and_exactly_the_mistake(course):
    got = scores(course)
    lost = {f"{i}_test" for i in runpy.run_path(str(MISTAKE))["EXPECT"]}
    assert lost
    for cell, (score, most) in got["full"].items():
        assert score == most, f"full solution lost {cell}"
    for cell, (score, _) in got["stub"].items():
        assert score == 0, f"untouched stub scored on {cell}"
    for cell, (score, most) in got["mistake"].items():
        assert score == (0 if cell in lost else most), f"mistake: {cell} scored {score}/{most}"


def test_feedback_shows_each_students_score(course):
    most = sum(it.points for stem in NOTEBOOKS for it in items_for(stem))
    totals = {
        s: sum(sc for sc, _ in cells.values())
        for s, cells in scores(course).items()
        if s != "memorized"
    }
    lost = sum(
        it.points for it in items_for("ex02") if it.id in runpy.run_path(str(MISTAKE))["EXPECT"]
    )
    assert totals == {"full": most, "stub": 0, "mistake": most - lost}
    for student in totals:
        per_nb = []
        for stem in NOTEBOOKS:
            html = (course / "feedback" / student / ASSIGNMENT / f"{stem}.html").read_text(
                encoding="utf-8"
            )
            per_nb.append(float(re.search(r"Score: ([0-9.]+) / [0-9.]+", html).group(1)))
        assert sum(per_nb) == totals[student], (student, per_nb)


def test_seed_only_in_the_instructors_files(course):
    def has_seed(folder: str) -> list[str]:
        return [
            p.relative_to(course).as_posix()
            for p in sorted((course / folder).rglob("*.*"))
            if str(SEED) in p.read_text(encoding="utf-8", errors="replace")
        ]

    assert len(has_seed("source")) == len(NOTEBOOKS)
    assert has_seed("autograded")  # nbgrader put the hidden tests back to grade
    assert has_seed("release") == [] and has_seed("feedback") == []


def _without_stub_lines(source: str) -> list[str]:
    return [
        ln
        for ln in source.split("\n")
        if ln.strip() not in {"# YOUR CODE HERE", "raise NotImplementedError()"}
        and not ln.strip().startswith("raise NotImplementedError(")
    ]


def test_student_version_is_exercises_except_stub_lines(course):
    for stem in NOTEBOOKS:
        released = nbformat.read(
            course / "release" / ASSIGNMENT / f"{stem}.ipynb", as_version=4
        ).cells
        ours = nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4).cells
        assert [c.cell_type for c in released] == [c.cell_type for c in ours], stem
        for a, b in zip(released, ours):
            if a.source != b.source:  # only solution cells may differ, and only in the stub line
                assert a.metadata["nbgrader"]["solution"], a.source
                assert _without_stub_lines(a.source) == _without_stub_lines(b.source)
                assert "# TASK " in a.source and "# HINT" not in a.source  # the task line, no hints


def test_precomputed_public_inputs_do_not_score(course):
    """The visible check (seed 12345) passes, the hidden one (the instructor's seed) does not."""
    got = scores(course)["memorized"]
    assert got["ex01_softmax_test"][0] == 0 and got["ex01_scores_test"] == (1.0, 1.0)
    nb = nbformat.read(
        course / "autograded" / "memorized" / ASSIGNMENT / f"{NOTEBOOKS[0]}.ipynb", as_version=4
    )
    (cell,) = [
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex01_softmax_test"
    ]
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert re.match(r"PASSED\s+ex01_softmax .*\nFAILED\s+ex01_softmax ", text), text

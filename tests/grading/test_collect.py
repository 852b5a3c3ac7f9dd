"""One collector for every path (issue 31, item 1): each exercise is found by its content and its
name wherever it lies in a student's folder; what was taken from where and what was ignored is
reported per student and class-wide; competing copies are decided by a stated rule, never by
the files' modification times."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_grader.registry import notebooks

EX01, EX02 = "ex01_dot_product_attention", "ex02_scaled_dot_product_attention"


def _points(stem: str) -> float:
    return sum(it.points for it in notebooks()[stem])


def _old(path, age: int) -> None:
    os.utime(path, (1_000_000 + age, 1_000_000 + age))


def test_collect_by_content_and_name_with_a_stated_rule(tmp_path):
    from mha_grader.collect import COMPETING, FOUND, MISSING, TAKEN, collect

    s = tmp_path / "s"
    (s / "Downloads").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{EX02}.ipynb", s / "Downloads" / f"{EX02} (1).ipynb")
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", s / "homework.ipynb")  # found by its cells alone
    (s / "notes.txt").write_text("x")
    got = collect(s, [EX01, EX02])
    assert got.status == {EX01: FOUND, EX02: FOUND}
    assert got.source == {EX01: "homework.ipynb", EX02: f"Downloads/{EX02} (1).ipynb"}
    assert got.ignored == {"notes.txt": "not a notebook (.ipynb)"}
    assert (
        f"graded Downloads/{EX02} (1).ipynb as {EX02}.ipynb (found by its cells and its name)"
        in got.notes
    )
    assert f"graded homework.ipynb as {EX01}.ipynb (found by its cells)" in got.notes

    # two different ex01 files: the one with work in it wins even when the stub is newer
    t = tmp_path / "t"
    t.mkdir()
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", t / f"{EX01} (1).ipynb")
    shutil.copy(EXERCISES / f"{EX01}.ipynb", t / f"Copy of {EX01}.ipynb")
    _old(t / f"{EX01} (1).ipynb", 0)
    _old(t / f"Copy of {EX01}.ipynb", 100)
    got = collect(t, [EX01, EX02])
    assert got.status == {EX01: COMPETING, EX02: MISSING}
    assert (
        got.source[EX01] == f"{EX01} (1).ipynb" and "fewest NotImplementedError" in got.rule[EX01]
    )
    assert f"Copy of {EX01}.ipynb" in got.ignored
    # the documented place wins over any other copy
    shutil.copy(EXERCISES / f"{EX01}.ipynb", t / f"{EX01}.ipynb")
    got = collect(t, [EX01])
    assert got.status == {EX01: COMPETING} and got.source[EX01] == f"{EX01}.ipynb"
    assert "documented place" in got.rule[EX01]
    # identical copies do not compete; a name that says ex02 over ex01's cells is ex01
    u = tmp_path / "u"
    (u / "a").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", u / "a" / f"{EX01}.ipynb")
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", u / f"{EX02}.ipynb")
    got = collect(u, [EX01, EX02])
    assert got.status == {EX01: FOUND, EX02: MISSING}, got
    assert any("its name says ex02 but its cells are ex01's" in n for n in got.notes)
    assert got.status[EX01] != TAKEN


def test_grade_collects_renamed_and_nested_notebooks(tmp_path):
    """A perfect student whose files were saved as ``Downloads/ex02_... (1).ipynb`` and
    ``homework.ipynb`` scored 0 with "missing notebook" rows and no warning."""
    sub = tmp_path / "submissions"
    (sub / "erin" / "Downloads").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{EX02}.ipynb", sub / "erin" / "Downloads" / f"{EX02} (1).ipynb")
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", sub / "erin" / "homework.ipynb")
    (sub / "erin" / "notes.txt").write_text("x")
    out = tmp_path / "graded"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course.cli",
            "grade",
            str(sub),
            "--out",
            str(out),
            "--key-file",
            str(tmp_path / "k"),
            "--no-progress",
            "--timeout",
            "15",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "erin" / "results.json").read_text())
    assert res["score"] == _points(EX01) + _points(EX02), res["tests"]
    assert f"graded Downloads/{EX02} (1).ipynb as {EX02}.ipynb" in res["output"]
    with open(out / "collection.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    taken = {r["exercise"]: (r["status"], r["file"]) for r in rows if r["exercise"]}
    assert taken[EX02] == ("found", f"Downloads/{EX02} (1).ipynb")
    assert taken[EX01] == ("found", "homework.ipynb")
    assert {r["file"] for r in rows if r["status"] == "ignored"} == {"notes.txt"}
    meta = json.loads((out / "grading.json").read_text())
    assert meta["collection"] == {"found elsewhere": 2, "competing": 0, "ignored files": 1}
    assert "2 notebook(s) found under another name or folder" in proc.stdout


def test_a_folder_of_many_notebooks_is_bounded(tmp_path, monkeypatch):
    from mha_grader import collect as C

    monkeypatch.setattr(C, "MAX_NOTEBOOKS", 3)
    for i in range(5):
        (tmp_path / "deep").mkdir(exist_ok=True)
        (tmp_path / "deep" / f"n{i}.ipynb").write_text("{}")
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", tmp_path / f"{EX01}.ipynb")
    got = C.collect(tmp_path, [EX01])
    assert got.source == {EX01: f"{EX01}.ipynb"}  # the top of the folder is read first
    assert sum("more than 3 notebooks" in why for why in got.ignored.values()) == 3

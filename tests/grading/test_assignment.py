"""`mha-course grade --assignment` (issue 31, item 4): items, totals, columns and feedback of the
assignment's exercises only (a perfect student on a one-exercise assignment saw "5 / 132" and
dozens of "missing notebook" rows)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest
from grading_helpers import ROOT, SOLUTIONS

from mha_grader.registry import all_items, notebooks

EX01, EX02 = "ex01_dot_product_attention", "ex02_scaled_dot_product_attention"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_assignment_limits_items_totals_columns_and_feedback(tmp_path):
    sub = tmp_path / "submissions"
    (sub / "alice").mkdir(parents=True)
    for stem in (EX01, EX02):
        shutil.copy(SOLUTIONS / f"{stem}.ipynb", sub / "alice" / f"{stem}.ipynb")
    (sub / "bob").mkdir()
    out = tmp_path / "graded"
    proc = _cli(
        "grade",
        str(sub),
        "--out",
        str(out),
        "--key-file",
        str(tmp_path / "k"),
        "--no-progress",
        "--assignment",
        "ex01",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ex01 = [it for it in all_items() if it.notebook == EX01]
    most = sum(it.points for it in ex01)
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["student", "total", *(it.id for it in ex01)]
    assert {r[0]: float(r[1]) for r in rows[1:]} == {"alice": most, "bob": 0}
    res = json.loads((out / "alice" / "results.json").read_text())
    assert [t["name"] for t in res["tests"]] == [it.id for it in ex01]
    assert f"**Score: {most:g} / {most:g}**" in (out / "alice" / "feedback.md").read_text()
    assert "ex02" not in (out / "bob" / "feedback.md").read_text().replace("missing", "")
    meta = json.loads((out / "grading.json").read_text())
    assert meta["assignment"] == [EX01] and meta["items"] == [it.id for it in ex01]
    assert "not part of this assignment" in res["output"]  # alice's ex02 was ignored, and said so


def test_assignment_file_and_bad_values(tmp_path):
    from mha_course.commands.grade import parse_assignment

    listing = tmp_path / "ps1.txt"
    listing.write_text("# problem set 1\nex02  # attention\nex01_dot_product_attention\n")
    assert parse_assignment(str(listing)) == [EX01, EX02]  # course order
    assert parse_assignment("ex02,ex01") == [EX01, EX02]
    with pytest.raises(
        ValueError, match=r"--assignment: expected exercises such as ex02,ex04 .*'ex99' is not one"
    ):
        parse_assignment("ex01,ex99")
    (tmp_path / "s").mkdir()
    for bad in ("ex99", ","):
        proc = _cli("grade", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--assignment", bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "--assignment: expected exercises" in proc.stderr and repr(bad) in proc.stderr
    assert len(notebooks()) > 2

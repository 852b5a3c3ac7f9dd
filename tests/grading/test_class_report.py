"""The class report (issue 31, item 6): pass rate per item, each named mistake counted under a
stable id (also in results.json and a CSV), the most common mistakes per exercise, the totals'
distribution as a plot and the time per student; written by `grade` and by `mha-course report`."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest
from grading_helpers import ROOT, SOLUTIONS, build

from mha_grader.class_report import mistake_id
from mha_grader.registry import notebooks

EX01 = "ex01_dot_product_attention"
ITEMS = {it.id: it for it in notebooks()[EX01]}
WRONG_AXIS = {
    "ex01_softmax": """
def softmax(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
"""
}


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    sub = tmp / "submissions"
    (sub / "alice").mkdir(parents=True)
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", sub / "alice" / f"{EX01}.ipynb")
    for name in ("bob", "carol"):  # the softmax over the wrong axis
        build("ex01", sub / name / f"{EX01}.ipynb", replace=WRONG_AXIS)
    (sub / "dave").mkdir()  # nothing handed in
    proc = _cli(
        "grade",
        sub,
        "--out",
        tmp / "out",
        "--key-file",
        tmp / "k",
        "--assignment",
        "ex01",
        "--no-progress",
        "--timeout",
        "15",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "class report:" in proc.stdout
    return tmp / "out"


def test_mistakes_have_ids_in_results_and_csv(graded):
    axis = {mistake_id(m.name) for m in ITEMS["ex01_softmax"].mistakes if "axis" in m.feedback}
    bob = {t["name"]: t for t in json.loads((graded / "bob" / "results.json").read_text())["tests"]}
    assert bob["ex01_softmax"]["extra_data"]["mistake"] in axis
    assert bob["ex01_softmax"]["extra_data"]["status"] == "wrong values"
    alice = json.loads((graded / "alice" / "results.json").read_text())["tests"]
    assert all(
        "mistake" not in t["extra_data"] and t["extra_data"]["status"] == "passed" for t in alice
    )
    with open(graded / "class_items.csv", newline="") as f:
        rows = {(r["student"], r["item"]): r for r in csv.DictReader(f)}
    assert len(rows) == 4 * len(ITEMS)
    assert rows[("carol", "ex01_softmax")]["mistake"] in axis
    assert rows[("dave", "ex01_softmax")]["status"] == "missing notebook"


def test_class_report_counts_pass_rates_and_mistakes(graded):
    rep = json.loads((graded / "class_report.json").read_text())
    soft = next(st for st in rep["items"] if st["item"] == "ex01_softmax")
    assert (soft["students"], soft["handed_in"], soft["passed"]) == (4, 3, 1)
    assert soft["pass_rate"] == 0.25 and abs(soft["pass_rate_handed_in"] - 1 / 3) < 1e-9
    ((mistake, count),) = soft["mistakes"].items()
    assert count == 2 and "axis" in mistake
    top = rep["most_common_mistakes"][EX01][0]
    assert top["count"] >= 2 and top["feedback"]
    most = sum(it.points for it in ITEMS.values())
    assert (
        rep["max_total"] == most and rep["totals"]["alice"] == most and rep["totals"]["dave"] == 0
    )
    assert set(rep["seconds_per_student"]) == {"alice", "bob", "carol"}  # dave had nothing to run
    assert all(s > 0 for s in rep["seconds_per_student"].values())
    assert (graded / "class_totals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (graded / "class_report.html").read_text()
    assert "class_totals.png" in page and mistake in page and "25%" in page
    with open(graded / "class_report.csv", newline="") as f:
        assert {r["item"] for r in csv.DictReader(f)} == set(ITEMS)


def test_report_command_rewrites_and_refuses(graded, tmp_path):
    (graded / "class_report.json").unlink()
    proc = _cli("report", graded)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((graded / "class_report.json").read_text())["students"] == 4
    assert "ex01_softmax/" in proc.stdout
    proc = _cli("report", tmp_path / "nowhere")
    assert (
        proc.returncode == 2
        and "report: OUT: expected a folder" in proc.stderr
        and "Traceback" not in proc.stderr
    )

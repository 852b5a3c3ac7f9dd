"""`mha-course export` (issue #31 item 8): a gradebook as the CSV Canvas or Moodle imports.

The rosters here are shaped like the documented files (mha_grader/lms.py cites them): a Canvas
gradebook export (Student, ID, SIS User ID, SIS Login ID, Section, its read-only score columns and
its "Points Possible" row) with a ``folder`` column added, and a Moodle-style list of email
addresses. The gradebook is written by the grader's own writers, as `grade` leaves it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mha_grader.registry import notebooks
from mha_grader.report import write_gradebook

EX01 = "ex01_dot_product_attention"
IDS = [it.id for it in notebooks()[EX01]]
POSSIBLE = sum(it.points for it in notebooks()[EX01])
SCORES = {"alice-gh": {i: 1.0 for i in IDS}, "bob-gh": {IDS[0]: 1.0}}

CANVAS_EXPORT = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Quiz 1 (87568490)", "folder"],
    ["    Points Possible", "", "", "", "", "10", ""],
    ["Liddell, Alice", "1001", "S1", "aliddell", "Section A", "9", "alice-gh"],
    ["Builder, Bob", "1002", "S2", "bbuilder", "Section B", "7", "bob-gh"],
    ["Nobody, Carl", "1003", "S3", "cnobody", "Section A", "", "carl-gh"],
]
MOODLE_ROSTER = [
    ["folder", "Email address"],
    ["alice-gh", "alice@example.org"],
    ["bob-gh", "bob@example.org"],
]


def _write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


@pytest.fixture()
def gradebook(tmp_path: Path) -> Path:
    out = tmp_path / "graded"
    out.mkdir()
    write_gradebook(out, IDS, SCORES)
    meta = {"items": IDS, "assignment": [EX01]}
    (out / "grading.json").write_text(json.dumps(meta))
    return out


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", "export", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_import_columns_points_row_and_totals(tmp_path: Path, gradebook: Path) -> None:
    roster = _write_csv(tmp_path / "canvas_export.csv", CANVAS_EXPORT)
    proc = _cli(tmp_path, "graded", "--format", "canvas", "--roster", roster.name, "--out", "c.csv")
    assert proc.returncode == 0, proc.stderr
    rows = _read(tmp_path / "c.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "mha-course ex01"]
    assert rows[1][0] == "Points Possible" and float(rows[1][-1]) == POSSIBLE
    got = {r[1]: float(r[-1]) for r in rows[2:]}  # by Canvas ID
    assert got == {"1001": sum(SCORES["alice-gh"].values()), "1002": 1.0}
    assert rows[2][:5] == CANVAS_EXPORT[2][:5]
    assert "carl-gh" in proc.stdout and "left out" in proc.stdout  # on the roster, not graded


def test_moodle_identifier_and_grade_item(tmp_path: Path, gradebook: Path) -> None:
    roster = _write_csv(tmp_path / "moodle.csv", MOODLE_ROSTER)
    proc = _cli(
        tmp_path, "graded", "--format", "moodle", "--roster", roster.name, "--out", "m.csv",
        "--column", "Attention ps1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = _read(tmp_path / "m.csv")
    assert rows[0] == ["Email address", "Attention ps1"]
    assert {r[0]: float(r[1]) for r in rows[1:]} == {
        "alice@example.org": sum(SCORES["alice-gh"].values()),
        "bob@example.org": 1.0,
    }


@pytest.mark.parametrize(
    "fmt, roster, extra, says",
    [
        ("canvas", CANVAS_EXPORT[:3], [], "have no row in the roster (column 'folder'), so the LMS could not tell who they are: ['bob-gh']"),
        ("moodle", MOODLE_ROSTER[:2], [], "['bob-gh']"),
        ("canvas", MOODLE_ROSTER, [], "the roster lacks ['Student', 'ID', 'SIS User ID', 'SIS Login ID', 'Section']"),
        ("moodle", [["folder", "name"], ["alice-gh", "A"], ["bob-gh", "B"]], [], "--id-column: Moodle maps users by"),
        ("moodle", MOODLE_ROSTER, ["--match", "login"], "expected a CSV with a 'login' column"),
        ("moodle", [*MOODLE_ROSTER, ["bob-gh", "b2@example.org"]], [], "names these folders more than once: ['bob-gh']"),
    ],
)  # fmt: skip
def test_refused_with_what_is_wrong(tmp_path, gradebook, fmt, roster, extra, says) -> None:
    path = _write_csv(tmp_path / "roster.csv", roster)
    proc = _cli(
        tmp_path, "graded", "--format", fmt, "--roster", path.name, "--out", "x.csv", *extra
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert says in proc.stderr and not (tmp_path / "x.csv").exists(), proc.stderr


def test_not_a_gradebook_and_existing_out_are_refused(tmp_path: Path, gradebook: Path) -> None:
    roster = _write_csv(tmp_path / "moodle.csv", MOODLE_ROSTER)
    proc = _cli(
        tmp_path, "nowhere", "--format", "moodle", "--roster", roster.name, "--out", "m.csv"
    )
    assert proc.returncode == 2 and "expected the OUT folder of `mha-course grade`" in proc.stderr
    (tmp_path / "m.csv").write_text("keep me")
    proc = _cli(tmp_path, "graded", "--format", "moodle", "--roster", roster.name, "--out", "m.csv")
    assert proc.returncode == 2 and "expected a new file" in proc.stderr
    assert (tmp_path / "m.csv").read_text() == "keep me"


def test_an_out_file_that_cannot_be_written_is_one_line(tmp_path: Path, gradebook: Path) -> None:
    roster = _write_csv(tmp_path / "moodle.csv", MOODLE_ROSTER)
    proc = _cli(
        tmp_path, "graded", "--format", "moodle", "--roster", roster.name, "--out", "no/dir/m.csv"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--out: cannot write 'no/dir/m.csv'" in proc.stderr

"""`mha-course handout DIR` (issue 31, item 2): a student repository without the answers (the
guide said "give students the repository", which holds solutions/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_handout_has_no_solutions(tmp_path):
    out = tmp_path / "student-repo"
    proc = _cli("handout", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {p.relative_to(out).parts[0] for p in out.rglob("*")}
    assert {
        "notebooks",
        "exercises",
        "mha_course",
        "mha_grader",
        "pyproject.toml",
        "README.md",
    } <= names
    assert not names & {"solutions", "tests", "classroom", "docs", "benchmarks"}, names
    solutions = sorted(p.name for p in (ROOT / "solutions").glob("ex*.ipynb"))
    assert sorted(p.name for p in (out / "exercises").glob("*.ipynb")) == solutions
    for nb in out.rglob("*.ipynb"):
        assert "### BEGIN SOLUTION" not in nb.read_text(encoding="utf-8"), nb
    for sol in (ROOT / "solutions").glob("ex*.ipynb"):  # the exercises are the released stubs
        assert (out / "exercises" / sol.name).read_text() == (
            ROOT / "exercises" / sol.name
        ).read_text()
    assert not list(out.rglob("*.key")) and not list(out.rglob("__pycache__"))
    readme = (out / "README.md").read_text()
    assert "make lab" in readme and ".venv/bin/mha-course check exercises/ex02_" in readme
    assert "left out: solutions/" in proc.stdout


def test_handout_refuses_a_used_folder(tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    for dest in (tmp_path / "used", ROOT / "notebooks" / "handout"):
        proc = _cli("handout", dest)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "DIR: expected" in proc.stderr and str(dest.name) in proc.stderr
    assert (tmp_path / "used" / "x").read_text() == "mine" and not (
        ROOT / "notebooks" / "handout"
    ).exists()

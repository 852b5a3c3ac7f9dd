"""classroom/check_exercises.sh, the student-repo workflow's check step: it must fail when items
fail (the inline loop it replaces piped `mha-course check` into `tee` without pipefail and
always reported "all items passed: yes")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "classroom" / "check_exercises.sh"
NOTEBOOK = "ex01_dot_product_attention.ipynb"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _check(tmp_path: Path, *notebooks: Path) -> subprocess.CompletedProcess:
    # `mha-course` from this environment, as the workflow has it after `pip install`.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out"), *map(str, notebooks)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_an_untouched_stub_fails_the_step(tmp_path):
    run = _check(tmp_path, ROOT / "exercises" / NOTEBOOK)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "all items passed: no" in run.stdout
    assert "FAILED" in (tmp_path / "out" / "check.txt").read_text()
    assert (tmp_path / "out" / "submissions" / "student" / NOTEBOOK).exists()


@pytest.mark.slow
def test_a_solution_passes_the_step(tmp_path):
    run = _check(tmp_path, ROOT / "solutions" / NOTEBOOK)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all items passed: yes" in run.stdout
    assert (tmp_path / "out" / "submissions" / "student" / NOTEBOOK).exists()


def test_a_missing_notebook_fails_and_no_arguments_is_a_usage_error(tmp_path):
    assert _check(tmp_path, tmp_path / "ex01_missing.ipynb").returncode == 1
    assert _check(tmp_path).returncode == 2


def test_the_workflow_calls_the_script():
    workflow = (ROOT / "classroom" / "autograde.yml").read_text()
    assert "bash .github/check_exercises.sh autograde exercises/" in workflow
    assert "| tee" not in workflow  # the check loop lives in the script, under pipefail

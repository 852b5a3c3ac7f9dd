"""classroom/autograde.yml's steps, run as GitHub would run them in a student repository.

Its install step used to default to ``git+https://github.com/mha-course/mha-course``, a URL no one
recorded as the course's: an instructor who did not set ``COURSE_SPEC`` had every student's check
install whatever that address holds (or fail). Now it installs ``COURSE_SPEC`` when set, else the
checked-out repository when it is the course itself, else fails saying what to set. The install
step runs here with a stand-in ``python`` that records the pip command (no network); the check and
score steps run for real, with ``mha-course`` from this environment as the workflow has it after
its install (classroom/README.md documents these steps).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "classroom" / "autograde.yml"
NOTEBOOK = "ex01_dot_product_attention.ipynb"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _steps() -> dict[str, dict]:
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["check"]
    return {step["name"]: step for step in job["steps"] if "name" in step}


def _step(prefix: str) -> str:
    (name,) = [n for n in _steps() if n.startswith(prefix)]
    return _steps()[name]["run"]


def test_no_invented_repository_url() -> None:
    text = WORKFLOW.read_text()
    env = yaml.safe_load(text)["jobs"]["check"]["env"]
    assert env["COURSE_SPEC"] == "${{ vars.COURSE_SPEC }}", env  # no fallback address
    urls = re.findall(r"https://github\.com/[^\s'\"@]+", text)
    assert all("<you>" in url for url in urls), (
        f"an address no one recorded as the course's: {urls}"
    )


def _install(cwd: Path, spec: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The install step's script under bash, with a ``python`` that records its arguments."""
    fake = cwd.parent / "fakebin"
    fake.mkdir(exist_ok=True)
    record = cwd.parent / "pip-calls.txt"
    (fake / "python").write_text(f'#!/bin/sh\necho "$*" >> "{record}"\n')
    (fake / "python").chmod((fake / "python").stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, COURSE_SPEC=spec, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        ["bash", "-e", "-c", _step("install the course")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = record.read_text().splitlines() if record.exists() else []
    return done, calls


def test_install_from_the_checked_out_course_when_no_spec(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "pyproject.toml", repo)  # a template made from the course's repository
    done, calls = _install(repo, "")
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls[-1] == "-m pip install --quiet .", calls


def test_install_the_spec_when_set(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "pyproject.toml", repo)
    spec = "mha-course @ git+https://example.org/me/mha-course@v1.0"
    done, calls = _install(repo, spec)
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls[-1] == f"-m pip install --quiet {spec}", calls


def test_no_spec_and_no_course_fails_saying_what_to_set(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "exercises").mkdir(parents=True)  # a template holding only exercises/
    done, calls = _install(repo, "")
    assert done.returncode == 1 and not calls, (done.stdout, calls)
    assert "::error::" in done.stdout and "COURSE_SPEC" in done.stdout, done.stdout


@pytest.mark.slow
def test_check_and_score_steps_in_a_student_repository(tmp_path: Path) -> None:
    """The template of classroom/README.md step 1: exercises/ plus .github/check_exercises.sh."""
    repo = tmp_path / "student"
    (repo / "exercises").mkdir(parents=True)
    (repo / ".github").mkdir()
    shutil.copy(ROOT / "classroom" / "check_exercises.sh", repo / ".github" / "check_exercises.sh")
    shutil.copy(ROOT / "exercises" / NOTEBOOK, repo / "exercises" / NOTEBOOK)  # an untouched stub
    summary = tmp_path / "summary.md"
    env = dict(
        os.environ,
        GITHUB_STEP_SUMMARY=str(summary),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    check = subprocess.run(
        ["bash", "-e", "-c", _step("mha-course check")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert check.returncode == 1, check.stdout + check.stderr  # a stub fails the check: a red run
    assert "FAILED  ex01_softmax" in check.stdout and "all items passed: no" in check.stdout
    score = subprocess.run(
        ["bash", "-e", "-c", _step("score")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert score.returncode == 0, score.stdout + score.stderr
    assert "Score: 0" in summary.read_text(), summary.read_text()[:2000]
    paths = [line.strip() for line in _upload_paths().splitlines() if line.strip()]
    missing = [p for p in paths if not (repo / p).exists()]
    assert not missing, f"the artifact's files were not written: {missing}"


def _upload_paths() -> str:
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["check"]
    (upload,) = [
        s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    return upload["with"]["path"]

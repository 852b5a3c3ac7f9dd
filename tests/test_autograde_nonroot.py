"""classroom/autograde.yml's check and score steps as GitHub's standard runner runs them: NOT root,
and bubblewrap cannot start (Ubuntu 24.04 blocks the user namespaces it needs).

Issue #31 item 10: there the score step's ``mha-course grade --seed 12345`` refused with exit 2
(no sandbox, and class grading needs one), so the run had no score, ``results.json`` or
``feedback.md``. The step now says ``--own-ci``: public inputs only, a sandbox where one starts,
else none, and every output says so. This test makes a user with ``useradd``, puts a ``bwrap``
first on its PATH that fails as Ubuntu 24.04's does, and runs the workflow's ``run:`` lines as
that user in a student repository (exercises/ + .github/check_exercises.sh). Needs root (to make
the user); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "classroom" / "autograde.yml"
NOTEBOOK = "ex01_dot_product_attention.ipynb"
USER = "mha-ci-runner"
UBUNTU_2404_BWRAP = "bwrap: setting up uid map: Permission denied"

needs_root = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="needs root: it creates a non-root user (useradd) to run the workflow's steps as",
    ),
    pytest.mark.skipif(
        not (shutil.which("useradd") and shutil.which("runuser") and shutil.which("bash")),
        reason="needs useradd, runuser and bash",
    ),
]


def _run_lines() -> list[tuple[str, str]]:
    """(name, script) of the job's steps that run after the install step, in order."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["check"]["steps"]
    named = [(s["name"], s["run"]) for s in steps if "run" in s and "name" in s]
    return [(n, r) for n, r in named if not n.startswith("install the course")]


@pytest.fixture()
def runner(tmp_path):
    """A non-root user and a world-readable work folder; both removed afterwards."""
    try:
        pwd.getpwnam(USER)
        made = False
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/bash", USER], check=True)
        made = True
    work = Path(tempfile.mkdtemp(prefix="mha-ci-"))
    work.chmod(0o755)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if made:
            subprocess.run(["userdel", USER], check=False)


def _runner_venv(where: Path) -> Path:
    """A venv as setup-python + the install step leave one, made from a Python of this version
    that the user can run (this environment's may lie under /root): its site-packages holds links
    to this environment's packages and to this checkout's ``mha_course`` and ``mha_grader`` (the
    grader hands its children site-packages, not PYTHONPATH). Returns its ``bin``."""
    import torch

    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    base = next(
        (
            c
            for c in (os.path.realpath(sys.executable), f"/usr/bin/{ver}", f"/usr/local/bin/{ver}")
            if subprocess.run(
                ["runuser", "-u", USER, "--", c, "-c", ""], cwd=where, capture_output=True
            ).returncode
            == 0
        ),
        None,
    )
    if base is None:
        pytest.skip(f"no {ver} the user {USER} can run (this one is {sys.executable})")
    venv = where / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = Path(torch.__file__).resolve().parents[1]  # this environment's site-packages
    (site,) = (venv / "lib").glob("python*/site-packages")
    for entry in ours.iterdir():
        if not entry.name.startswith(("__editable__", "mha_course", "mha_grader", "_mha")):
            (site / entry.name).symlink_to(entry)
    for pkg in ("mha_course", "mha_grader"):
        (site / pkg).symlink_to(ROOT / pkg)
    (venv / "bin" / "mha-course").write_text(
        f'#!/bin/sh\nexec {venv}/bin/python -m mha_course.cli "$@"\n'
    )
    (venv / "bin" / "mha-course").chmod(0o755)
    return venv / "bin"


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "got no --seed"),
        (["--key-file", "k.key"], "got --key-file k.key"),
        (["--key-file", "k.key", "--seed", "1"], "not allowed with argument"),  # argparse's own
    ],
)
def test_own_ci_is_refused_without_public_inputs(tmp_path: Path, args: list[str], says: str):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "mha_course.cli", "grade", "subs", "--out", "o", "--own-ci", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert says in proc.stderr and not (tmp_path / "k.key").exists(), proc.stderr


def test_the_engine_refuses_own_ci_with_a_secret_key(tmp_path: Path) -> None:
    from mha_grader.classroom import grade_class

    with pytest.raises(ValueError, match="--own-ci .* never with a secret key"):
        grade_class(tmp_path, tmp_path / "o", key=b"k" * 32, own_ci=True, progress=False)


@needs_root[0]
@needs_root[1]
@needs_root[2]
def test_check_and_score_steps_as_a_non_root_user_without_bubblewrap(runner: Path) -> None:
    bindir, repo = runner / "bin", runner / "student"
    bindir.mkdir()
    (repo / "exercises").mkdir(parents=True)
    (repo / ".github").mkdir()
    shutil.copy(ROOT / "classroom" / "check_exercises.sh", repo / ".github" / "check_exercises.sh")
    shutil.copy(ROOT / "solutions" / NOTEBOOK, repo / "exercises" / NOTEBOOK)  # all correct
    venv_bin = _runner_venv(runner)
    (bindir / "bwrap").write_text(f'#!/bin/sh\necho "{UBUNTU_2404_BWRAP}" >&2\nexit 1\n')
    (bindir / "bwrap").chmod(0o755)  # bubblewrap as on Ubuntu 24.04's runner
    shutil.chown(repo, USER)
    for p in repo.rglob("*"):
        shutil.chown(p, USER)
    summary = repo / "summary.md"
    env = {
        "HOME": str(repo),
        "PATH": f"{bindir}:{venv_bin}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = {}
    for name, script in _run_lines():
        done[name] = subprocess.run(
            ["runuser", "-u", USER, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items())]
            + ["bash", "-e", "-c", script],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=600,
        )
    (check_name, check), (score_name, score) = done.items()
    assert check.returncode == 0, check.stdout + check.stderr  # a solution: every item passed
    assert "NOT isolated" in check.stdout, check.stdout
    assert score.returncode == 0, score.stdout + score.stderr  # before: exit 2, no score
    assert "not isolated" in score.stdout.lower() and UBUNTU_2404_BWRAP in score.stdout
    results = json.loads((repo / "autograde/out/student/results.json").read_text())
    ex01 = [t for t in results["tests"] if t["name"].startswith("ex01_")]
    assert ex01 and all(t["score"] == t["max_score"] for t in ex01), ex01
    assert results["score"] == sum(t["max_score"] for t in ex01), results["score"]
    feedback = (repo / "autograde/out/student/feedback.md").read_text()
    assert "not isolated: a student's own CI on PUBLIC inputs (--own-ci)" in feedback, feedback
    assert f"Score: {results['score']:g}" in summary.read_text()

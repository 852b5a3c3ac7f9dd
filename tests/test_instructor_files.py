"""An instructor's grading files inside a repository stay out of git: the repository ignores
them, and ``mha-course grade`` warns when it creates the secret key inside a git work tree
(before, ``git add -A`` after grading in the course repository published the key)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mha_course.cli import main
from mha_course.commands.grade import key_in_git_warning

ROOT = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True)


@needs_git
def test_the_repository_ignores_grading_files() -> None:
    if _git(ROOT, "rev-parse", "--show-toplevel").returncode != 0:
        pytest.skip("not a git checkout")
    paths = [
        "graded.key",
        "graded/grades.csv",
        "graded/alice/feedback.md",
        "submissions/alice/ex01_dot_product_attention.ipynb",
        "class-2026.key",
    ]
    ignored = _git(ROOT, "check-ignore", *paths).stdout.split()
    assert sorted(ignored) == sorted(paths), f"not ignored: {set(paths) - set(ignored)}"


@needs_git
def test_warning_inside_a_work_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    warning = key_in_git_warning(repo / "graded.key")
    assert warning and "does NOT ignore it" in warning and "git add -A" in warning, warning
    (repo / ".gitignore").write_text("*.key\n")
    warning = key_in_git_warning(repo / "graded.key")
    assert warning and "git ignores it" in warning, warning
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if _git(outside, "rev-parse").returncode != 0:  # the temporary folder is in no work tree
        assert key_in_git_warning(outside / "graded.key") is None


@needs_git
def test_grade_prints_the_warning(tmp_path: Path, capsys) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "submissions").mkdir()
    assert (
        main(
            [
                "grade",
                str(tmp_path / "submissions"),
                "--out",
                str(tmp_path / "graded"),
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"the secret key {tmp_path / 'graded.key'} is inside the git work tree" in out, out

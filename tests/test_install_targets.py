"""`make lab` installs the learner's part only (the course, JupyterLab, what the chapters need,
triton, hf); the maintainer tools (pytest, ruff, Playwright, pre-commit, nbgrader) come with `make test`
and the other maintainer targets. Before, `make lab` installed the dev extra, so a learner's Lab
showed nbgrader's menus and its "Validate" button."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_environment import _bounds

ROOT = Path(__file__).resolve().parents[1]
MAINTAINER_TOOLS = {"pytest", "nbval", "hypothesis", "ruff", "pytest-xdist", "playwright",
                    "nbgrader", "pre-commit", "nbstripout", "pre-commit-hooks",
                    "pagefind",  # the static site's search index (make site)
                    "copydetect"}  # mha-course similarity


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    """The pip lines ``make -n TARGET`` would run for a venv that does not exist yet."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    done = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return [line for line in done.stdout.splitlines() if "pip install -e" in line]


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]


def _extras(lines: list[str]) -> set[str]:
    return {e for line in lines for m in re.finditer(r'-e "\.\[([^\]]*)\]"', line) for e in m.group(1).split(",")}


def test_make_lab_installs_no_maintainer_tools(tmp_path: Path) -> None:
    lines = _dry_run("lab", tmp_path)
    assert lines and _extras(lines) == {"triton", "hf"}, lines
    project = _project()
    extras = project["optional-dependencies"]
    learner = _bounds(project["dependencies"] + extras["triton"] + extras["hf"])
    assert not MAINTAINER_TOOLS & set(learner), MAINTAINER_TOOLS & set(learner)


def test_make_test_adds_the_dev_extra(tmp_path: Path) -> None:
    assert "dev" in _extras(_dry_run("test", tmp_path))
    assert "dev" in _extras(_dry_run("setup", tmp_path))  # .ci/run's default-path walk uses it
    project = _project()
    assert set(_bounds(project["optional-dependencies"]["dev"])) == MAINTAINER_TOOLS
    assert {"nbgrader", "copydetect"} <= set(_bounds(project["optional-dependencies"]["instructor"]))


def test_gradescope_installs_the_tested_torch() -> None:
    """classroom/gradescope/setup.sh pins the torch CI tests (it installed whatever was newest)."""
    setup = (ROOT / "classroom" / "gradescope" / "setup.sh").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pinned = re.search(r'TORCH_SPEC="\$\{TORCH_SPEC:-(torch==[0-9.]+)\}"', ci).group(1)
    assert f'TORCH_SPEC="{pinned}"' in setup and 'install --quiet "$TORCH_SPEC"' in setup

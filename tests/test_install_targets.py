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
MAINTAINER_TOOLS = {
    "pytest",
    "nbval",
    "hypothesis",
    "ruff",
    "pytest-xdist",
    "playwright",
    "nbgrader",
    "pre-commit",
    "nbstripout",
    "pre-commit-hooks",
    "pagefind",  # the static site's search index (make site)
    "copydetect",
}  # mha-course similarity


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    """The pip lines ``make -n TARGET`` would run for a venv that does not exist yet."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    done = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return [line for line in done.stdout.splitlines() if "pip install -e" in line]


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]


def _extras(lines: list[str]) -> set[str]:
    return {
        e
        for line in lines
        for m in re.finditer(r'-e "\.\[([^\]]*)\]"', line)
        for e in m.group(1).split(",")
    }


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
    assert {"nbgrader", "copydetect"} <= set(
        _bounds(project["optional-dependencies"]["instructor"])
    )


def test_gradescope_installs_the_tested_torch() -> None:
    """classroom/gradescope/setup.sh pins the torch CI tests (it installed whatever was newest)."""
    setup = (ROOT / "classroom" / "gradescope" / "setup.sh").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pinned = re.search(r'TORCH_SPEC="\$\{TORCH_SPEC:-(torch==[0-9.]+)\}"', ci).group(1)
    assert f'TORCH_SPEC="{pinned}"' in setup and 'install --quiet "$TORCH_SPEC"' in setup


def test_triton_installs_on_linux_only() -> None:
    """Triton publishes Linux wheels only: `make lab` (EXTRAS=triton,hf) failed on macOS and Windows.
    The extra carries a platform marker; hf, which has wheels everywhere, none (issue 32)."""
    Requirement = pytest.importorskip("packaging.requirements").Requirement
    extras = _project()["optional-dependencies"]
    for req in map(Requirement, extras["triton"]):
        assert req.marker is not None, req
        for platform, wanted in (("linux", True), ("darwin", False), ("win32", False)):
            assert req.marker.evaluate({"sys_platform": platform}) is wanted, (req, platform)
    assert all(Requirement(r).marker is None for r in extras["hf"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "**Linux only**: Triton publishes no macOS or Windows wheels" in readme


def test_make_site_installs_no_dev_extra(tmp_path: Path) -> None:
    """`make site` installed the dev extra into the learner's venv (nbgrader's menus in their Lab):
    it installs the site extra (Pagefind, Playwright), which holds no nbgrader (issue 32)."""
    extras = _extras(_dry_run("site", tmp_path))
    assert "site" in extras and "dev" not in extras, extras
    site = _bounds(_project()["optional-dependencies"]["site"])
    assert {"pagefind", "playwright"} <= set(site) and "nbgrader" not in site, site


def test_readme_windows_and_server_lines() -> None:
    """The README's Windows install learns with the hf extra (it installed `.[dev]` without hf, so
    chapter 20 could not run) and its http.server line listens on this machine only (issue 32)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    windows = readme[readme.index("**Windows without make**") :]
    windows = windows[: windows.index("```\n", windows.index("```powershell") + 5)]
    assert '.venv\\Scripts\\python -m pip install -e ".[hf]"' in windows, windows
    assert '-e ".[dev,hf]"' in windows and '-e ".[dev]"' not in windows, windows
    servers = re.findall(r"python -m http\.server[^`\n]*", readme)
    assert servers and all("-b 127.0.0.1" in s for s in servers), servers
    ci = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    assert '-e ".[dev]"' not in ci and '-e ".[dev,hf]"' in ci

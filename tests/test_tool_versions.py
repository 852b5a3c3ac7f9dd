"""One source of truth for tool versions: pyproject.toml's [dev] extras.

The pre-commit hooks install their tools at exactly the versions pyproject pins, so
`pre-commit run` and `make lint` run the same ruff (an older pinned ruff once failed UP038 on
files `make lint` passed).
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import yaml
from test_environment import _bounds, _load_toml

ROOT = Path(__file__).resolve().parent.parent


def dev_pins() -> dict[str, str]:
    """``{"ruff": "0.17.6", ...}``: the [dev] extras pinned with ``==``."""
    dev = _load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]["dev"]
    return {name: bound[2:] for name, bound in _bounds(dev).items() if bound.startswith("==")}


def hooks() -> list[dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return [dict(hook, repo=repo["repo"]) for repo in config["repos"] for hook in repo["hooks"]]


def test_the_linters_are_pinned_in_pyproject():
    assert {"ruff", "nbstripout", "pre-commit-hooks"} <= set(dev_pins()), dev_pins()


def test_every_hook_installs_the_version_pyproject_pins():
    pins = dev_pins()
    seen = set()
    for hook in hooks():
        # A hook from another repository would bring its own version (its `rev`).
        assert hook["repo"] == "local", f"hook {hook['id']}: use a local hook with pinned deps"
        if hook["language"] == "system":
            continue
        assert hook["language"] == "python", hook
        deps = _bounds(hook.get("additional_dependencies", []))
        assert deps, f"hook {hook['id']}: no additional_dependencies"
        for name, bound in deps.items():
            assert name in pins, f"hook {hook['id']}: {name} is not pinned in pyproject [dev]"
            assert bound == f"=={pins[name]}", (
                f"hook {hook['id']}: {name}{bound}, pyproject pins {name}=={pins[name]}"
            )
            seen.add(name)
    assert {"ruff", "nbstripout", "pre-commit-hooks"} <= seen, seen


def test_make_lint_runs_the_pinned_ruff():
    """The venv's ruff (`make lint`) is the pinned one (make reinstalls when pyproject changes)."""
    assert version("ruff") == dev_pins()["ruff"]

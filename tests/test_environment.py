"""pyproject.toml (dependencies + [dev] extras) and environment.yml list the same packages with the
same lower bounds; and the device helper works without a GPU."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from mha_course import describe_device, get_device

ROOT = Path(__file__).resolve().parent.parent
# conda-forge names that differ from PyPI's (conda-forge's `torch` and `playwright` are other
# packages: playwright there is the Node.js tool); python and pip are conda's own, "-e ." is us.
CONDA_TO_PIP = {"pytorch": "torch", "pytorch-cpu": "torch", "playwright-python": "playwright"}
CONDA_ONLY = {"python", "pip"}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*((?:>=|==)\s*[0-9][^,;\s]*)?")


def _load_toml(path: Path) -> dict:
    """tomllib is in the standard library from Python 3.11. On 3.10 (which the course supports)
    we do not add the tomli package for one test: a tiny reader picks the two string lists we
    need — ``dependencies = [...]`` and the ``dev = [...]`` extra — out of the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        text = path.read_text()

        def string_list(key: str) -> list[str]:
            block = re.search(rf"^{key}\s*=\s*\[(.*?)\]", text, re.S | re.M)
            return re.findall(r'"([^"]+)"', block.group(1)) if block else []

        return {
            "project": {
                "dependencies": string_list("dependencies"),
                "optional-dependencies": {"dev": string_list("dev")},
            }
        }
    with path.open("rb") as f:
        return tomllib.load(f)


def _bounds(requirements: list[str]) -> dict[str, str]:
    """``["torch>=2.5", "numpy"]`` -> ``{"torch": ">=2.5", "numpy": ""}`` (names normalised)."""
    out = {}
    for req in requirements:
        m = REQUIREMENT.match(req)
        assert m, f"cannot read requirement {req!r}"
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        out[name] = (m.group(2) or "").replace(" ", "")
    return out


def pyproject_requirements() -> dict[str, str]:
    project = _load_toml(ROOT / "pyproject.toml")["project"]
    return _bounds(project["dependencies"] + project["optional-dependencies"]["dev"])


def _environment_items() -> tuple[list[str], list[str]]:
    """The ``dependencies:`` list of environment.yml and its ``pip:`` sub-list, read line by line
    (no PyYAML needed: the file is a flat list of ``- name>=bound`` plus a ``- pip:`` sub-list)."""
    conda, pip, inside = [], [], False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped:
            continue
        if not line.startswith((" ", "-")):  # a new top-level key ends the list
            inside = stripped == "dependencies:"
            continue
        item = stripped.strip()
        if inside and item.startswith("- "):
            (pip if line.startswith("      ") else conda).append(item[2:].strip())
    return conda, pip


def conda_requirements() -> dict[str, str]:
    """What environment.yml installs, in PyPI's names: the conda packages through CONDA_TO_PIP,
    plus its pip sub-list (PyPI names already; ``-e .`` is the course itself)."""
    conda, pip = _environment_items()
    names = []
    for item in conda:
        if item.endswith(":"):  # "- pip:" opens the pip sub-list
            continue
        name = REQUIREMENT.match(item).group(1).lower()
        if name in CONDA_ONLY:
            continue
        names.append(CONDA_TO_PIP.get(name, name) + item[len(name) :])
    return _bounds(names + [item for item in pip if item != "-e ."])


def test_pyproject_and_environment_yml_agree():
    pip, conda = pyproject_requirements(), conda_requirements()
    assert "torch" in pip and "pytest" in pip  # both lists were read
    assert set(pip) == set(conda), (
        f"only in pyproject: {sorted(set(pip) - set(conda))}, "
        f"only in environment.yml: {sorted(set(conda) - set(pip))}"
    )
    differ = {n: (pip[n], conda[n]) for n in pip if pip[n] != conda[n]}
    assert not differ, f"lower bounds differ (pyproject, environment.yml): {differ}"


def test_requirement_reader():
    assert _bounds(["torch>=2.5", "nbval >= 0.11", "Foo_Bar[extra]>=1", "ruff==0.17.6"]) == {
        "torch": ">=2.5",
        "nbval": ">=0.11",
        "foo-bar": ">=1",
        "ruff": "==0.17.6",
    }


def test_conda_names_are_the_python_packages():
    """conda-forge's ``playwright`` is the Node.js tool and ``torch`` is not PyTorch: the names
    that differ go through CONDA_TO_PIP, never in PyPI's spelling."""
    conda, _ = _environment_items()
    names = {REQUIREMENT.match(item).group(1).lower() for item in conda}
    assert "playwright-python" in names and "pytorch" in names
    assert not names & {"playwright", "torch"}, sorted(names & {"playwright", "torch"})


def test_environment_yml_offers_the_cpu_build_with_the_same_bound():
    text = (ROOT / "environment.yml").read_text()
    cpu = re.search(r"- pytorch-cpu(>=[0-9.]+)", text)
    assert cpu, "environment.yml: the commented pytorch-cpu alternative is missing"
    assert cpu.group(1) == pyproject_requirements()["torch"]


def test_environment_yml_keeps_the_editable_install():
    assert "- -e ." in (ROOT / "environment.yml").read_text()


def test_device_helper_on_any_machine():
    assert get_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert get_device().type == expected
    assert describe_device("cpu").startswith("cpu: ")

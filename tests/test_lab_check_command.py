"""The check command the exercises print, run where a learner types it in the Lab that
``make lab`` starts (tools/lab.py): a Lab terminal started in ``exercises/`` or ``notebooks/``, and a
``!``-line in an exercise notebook (its kernel's folder is ``exercises/``), with no environment
activated: only what tools/lab.py puts on PATH. Before, the command was not on PATH there, and
its path ``exercises/...`` only held from the repository root.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = "ex01_dot_product_attention.ipynb"
COMMAND = f"mha-course check exercises/{EXERCISE}"  # what the exercise's "Check your work" prints


def _lab_environment() -> dict[str, str]:
    """The Lab's environment as tools/lab.py makes it, from a shell where nothing is activated."""
    spec = importlib.util.spec_from_file_location("mha_lab_tool", ROOT / "tools" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    bare = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "CONDA_PREFIX"}}
    bare["PATH"] = "/usr/bin:/bin"
    bare["PYTHONPATH"] = str(ROOT)  # this checkout's course, whichever venv runs it
    return lab.environment(bare)


@pytest.mark.skipif(os.name == "nt", reason="a POSIX shell")
@pytest.mark.parametrize("folder", ["exercises", "notebooks"])
def test_printed_command_in_a_lab_terminal(folder: str) -> None:
    assert COMMAND in (ROOT / "exercises" / EXERCISE).read_text(encoding="utf-8")
    done = subprocess.run(
        ["/bin/sh", "-c", COMMAND],
        cwd=ROOT / folder,
        env=_lab_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert "FAILED  ex01_softmax" in out and "score: 0/5" in out, out


@pytest.mark.skipif(os.name == "nt", reason="a POSIX shell")
def test_printed_command_as_a_bang_line_in_an_exercise(tmp_path: Path) -> None:
    """A notebook in exercises/ with the printed command as a ``!``-line, run by a kernel started
    with the Lab's environment (as the Lab starts kernels)."""
    (tmp_path / "exercises").mkdir()
    shutil.copy(ROOT / "exercises" / EXERCISE, tmp_path / "exercises" / EXERCISE)
    path = tmp_path / "exercises" / "bang_line.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"!{COMMAND}")]), path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--stdout",
            str(path),
        ],
        cwd=path.parent,
        env=_lab_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = "".join(
        o.get("text", "") for o in nbformat.reads(done.stdout, as_version=4).cells[0].outputs
    )
    assert "FAILED  ex01_softmax" in out and "score: 0/5" in out, out

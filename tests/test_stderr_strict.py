"""The one environment-dependent log line torch can print when the course imports
``torch.utils.benchmark`` is kept out of notebook outputs, and nothing else is.

torch.utils.cpp_extension logs "No CUDA runtime is found, using CUDA_HOME=..." on import when torch
is a CUDA build, a CUDA toolkit is installed and no GPU can be used (a fresh `make test` on a
GPU-less machine with /usr/local/cuda, issue 11). A CPU build never prints it, so the tests make a
CPU build look like that machine: ``torch.cuda._is_compiled``, ``is_available`` and ``torch.version.cuda`` patched,
``CUDA_HOME`` pointing at an existing folder. The control case proves the setup really prints the
line, and strict nbval over small notebooks proves real warnings and errors still fail.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from mha_course.benchmark.timing import CUDA_HOME_NOTICE, _DropCudaHomeNotice, torch_benchmark

ROOT = Path(__file__).resolve().parent.parent
# Run in a fresh interpreter: torch.utils.cpp_extension logs only when it is first imported.
LOOK_LIKE_A_GPU_LESS_CUDA_MACHINE = """
import torch
torch.cuda._is_compiled = lambda: True
torch.cuda.is_available = lambda: False
torch.version.cuda = "12.0"
"""


def _fresh_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-c", LOOK_LIKE_A_GPU_LESS_CUDA_MACHINE + code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_the_setup_reproduces_the_notice(tmp_path):
    """Control: a plain import of torch.utils.benchmark prints the line on stderr."""
    run = _fresh_python("import torch.utils.benchmark", tmp_path)
    assert run.returncode == 0, run.stderr
    assert CUDA_HOME_NOTICE in run.stderr, run.stderr


def test_the_course_imports_torch_benchmark_without_the_notice(tmp_path):
    run = _fresh_python(
        textwrap.dedent("""
        import mha_course.benchmark
        from mha_course.benchmark.timing import time_interleaved, torch_benchmark
        assert "torch.utils.benchmark" not in __import__("sys").modules  # not on import
        assert torch_benchmark().Timer
        time_interleaved({"noop": lambda: None}, rounds=1, min_block_s=1e-4)
        import logging
        assert not logging.getLogger("torch.utils.cpp_extension").filters  # filter removed
        logging.getLogger("torch.utils.cpp_extension").warning("a later warning shows")
    """),
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert CUDA_HOME_NOTICE not in run.stderr, run.stderr
    assert "a later warning shows" in run.stderr


def test_the_filter_drops_only_the_notice():
    keep = _DropCudaHomeNotice()

    def record(msg, *args):
        return logging.LogRecord(
            "torch.utils.cpp_extension", logging.WARNING, __file__, 1, msg, args, None
        )

    assert not keep.filter(record("No CUDA runtime is found, using CUDA_HOME='%s'", "/x"))
    assert keep.filter(
        record("There are no %s version bounds defined for CUDA version %s", "g++", "12.0")
    )
    assert keep.filter(record("Error building extension"))
    assert torch_benchmark().Timer  # the real module


def _notebook(path: Path, *cells: tuple[str, list[dict]]) -> Path:
    """A notebook whose code cells have these sources and committed outputs."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for count, (source, outputs) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell(source)
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = count
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_strict_nbval_passes_the_course_import_and_still_fails_real_stderr(tmp_path):
    """One nbval run (one kernel per notebook) over four notebooks, all committed with clean
    outputs: the course's import passes; a warning, a log line and an error each fail."""
    patch = (LOOK_LIKE_A_GPU_LESS_CUDA_MACHINE, [])
    notebooks = {
        "course_import": _notebook(
            tmp_path / "course_import.ipynb",
            patch,
            (
                "from mha_course.benchmark.timing import torch_benchmark\n"
                "_ = torch_benchmark()\nprint('imported')",
                [{"output_type": "stream", "name": "stdout", "text": "imported\n"}],
            ),
        ),
        "raw_import": _notebook(
            tmp_path / "raw_import.ipynb",
            patch,
            (
                "import torch.utils.benchmark\nprint('imported')",
                [{"output_type": "stream", "name": "stdout", "text": "imported\n"}],
            ),
        ),
        "warning": _notebook(
            tmp_path / "warning.ipynb",
            patch,
            (
                "import warnings\nwarnings.warn('a real warning')\nprint('ran')",
                [{"output_type": "stream", "name": "stdout", "text": "ran\n"}],
            ),
        ),
        "log_line": _notebook(
            tmp_path / "log_line.ipynb",
            patch,
            (
                "import logging\nlogging.getLogger('torch.utils.cpp_extension').warning('other')\n"
                "print('ran')",
                [{"output_type": "stream", "name": "stdout", "text": "ran\n"}],
            ),
        ),
        "error": _notebook(tmp_path / "error.ipynb", patch, ("1 / 0", [])),
    }
    report = tmp_path / "report.xml"
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval",
            *map(str, notebooks.values()),
            "--nbval-sanitize-with",
            str(ROOT / "tests" / "nbval_sanitize.cfg"),
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={report}",
            "--rootdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    # Each notebook fails (or not) in its own cell 1, for the reason its name says.
    why: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        where = f"{case.get('classname', '')} {case.get('name', '')} {case.get('file', '')}"
        stem = next(k for k in notebooks if k in where)
        why.setdefault(stem, "")
        for child in case:
            if child.tag in ("failure", "error"):
                why[stem] += (child.get("message") or "") + (child.text or "")
    assert set(why) == set(notebooks), sorted(why)
    assert why["course_import"] == "", why["course_import"]
    stderr = "Unexpected output fields from running code: {'stderr'}"  # nbval's words
    expected = {
        "raw_import": stderr,
        "warning": stderr,
        "log_line": stderr,
        "error": "ZeroDivisionError",
    }
    for stem, text in expected.items():
        assert text in why[stem], json.dumps({stem: why[stem][-2000:]})

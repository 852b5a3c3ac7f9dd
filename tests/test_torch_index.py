"""tools/torch_index.py: which index `make setup` installs torch from (TORCH_INDEX=auto)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import torch_index  # noqa: E402


def test_linux_without_a_driver_takes_the_cpu_index_when_it_answers():
    index, message = torch_index.choose("linux", nvidia=False, reach=None)
    assert index == torch_index.CPU_INDEX and "CPU build" in message


def test_linux_without_a_driver_falls_back_in_one_line():
    index, message = torch_index.choose("linux", nvidia=False, reach="Name or service not known")
    assert index == "" and "\n" not in message
    assert "cannot be reached (Name or service not known)" in message and "CUDA" in message


def test_a_gpu_machine_and_other_systems_take_the_default_index():
    assert torch_index.choose("linux", nvidia=True, reach=None)[0] == ""
    assert torch_index.choose("darwin", nvidia=False, reach=None)[0] == ""
    assert torch_index.choose("win32", nvidia=False, reach=None)[0] == ""


def test_an_unreachable_index_is_reported_quickly():
    # Port 9 on this machine: nothing listens, so the connection is refused at once.
    reason = torch_index.probe("http://127.0.0.1:9/simple", timeout=2)
    assert reason is not None


def _run(arg: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "torch_index.py"), arg],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_explicit_choices_are_passed_through_unchanged():
    assert _run("https://example.org/simple").stdout == "https://example.org/simple\n"
    assert _run("").stdout == "\n"  # TORCH_INDEX= : pip's default index
    assert _run("").stderr == ""


def test_auto_prints_an_index_and_one_line_saying_why():
    run = _run("auto")
    assert run.returncode == 0
    assert run.stdout in ("\n", torch_index.CPU_INDEX + "\n")
    assert len(run.stderr.strip().splitlines()) == 1 and run.stderr.startswith("torch: ")

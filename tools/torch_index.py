"""Which package index `make setup` installs torch from (the Makefile's TORCH_INDEX=auto).

    python tools/torch_index.py auto     # what the Makefile runs by default
    python tools/torch_index.py URL      # an explicit index: printed back unchanged
    python tools/torch_index.py ""       # pip's default index (PyPI): printed back unchanged

Prints the index URL for ``pip install --index-url`` on stdout (an empty line means pip's default
index) and, for ``auto``, one line on stderr saying which torch build that gives and why:

- Linux with an NVIDIA driver (``/proc/driver/nvidia/version`` or a working ``nvidia-smi``):
  pip's default index, whose Linux torch is the CUDA build (several GB).
- Linux without one: PyTorch's CPU wheel index (a CPU build, a few hundred MB), if it answers
  within a few seconds; otherwise pip's default index, said in one line.
- macOS and Windows: pip's default index, whose torch is already a CPU (or Apple MPS) build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 5.0


def has_nvidia_driver() -> bool:
    """True when the NVIDIA kernel driver is loaded (what CUDA builds of torch need)."""
    if Path("/proc/driver/nvidia/version").exists():
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def probe(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if ``url`` answers within ``timeout`` seconds, else the reason it did not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as response:
            response.read(1)
        return None
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def choose(platform: str, nvidia: bool, reach: str | None) -> tuple[str, str]:
    """(index URL or "" for pip's default, the one-line message) for ``auto``."""
    if not platform.startswith("linux"):
        return "", f"torch: {platform}: the default index's torch is already a CPU/MPS build"
    if nvidia:
        return "", "torch: NVIDIA driver found: the default (CUDA) build from the default index"
    if reach is None:
        return CPU_INDEX, f"torch: no NVIDIA driver found: the CPU build from {CPU_INDEX}"
    return "", (
        f"torch: no NVIDIA driver found, but {CPU_INDEX} cannot be reached ({reach}): "
        "falling back to the default index (on Linux its torch is the CUDA build, "
        "several GB; it runs on the CPU too)"
    )


def main(argv: list[str]) -> int:
    wanted = argv[1] if len(argv) > 1 else "auto"
    if wanted.strip() != "auto":
        print(wanted.strip())
        return 0
    nvidia = sys.platform.startswith("linux") and has_nvidia_driver()
    reach = probe(CPU_INDEX) if sys.platform.startswith("linux") and not nvidia else None
    index, message = choose(sys.platform, nvidia, reach)
    print(message, file=sys.stderr)
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Chapter 8: the stamp every benchmark result carries — what ran, where, with which versions.

A timing without its hardware, software versions, dtype and thread count cannot be compared
with anything; the stamp makes every results file self-describing.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device | str) -> str:
    """``NVIDIA H100 80GB HBM3`` for a GPU, the CPU model for ``cpu``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment_stamp(device: torch.device | str, threads: int | None = None) -> dict:
    """Everything needed to interpret a number: device, versions, threads, date (UTC).

    ``cuda``/``cudnn`` are ``None`` on a CPU-only build; ``threads`` is the intra-op thread count
    the CPU timings used (``torch.get_num_threads()`` by default).
    """
    import numpy

    from mha_course import __version__

    device = torch.device(device)
    stamp = {
        "device_type": device.type,
        "device_name": device_name(device),
        "cpu_model": cpu_model(),
        "threads": int(threads if threads is not None else torch.get_num_threads()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mha_course": __version__,
        "git_commit": _git_commit(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        stamp["gpu_memory_bytes"] = int(props.total_memory)
        stamp["compute_capability"] = f"{props.major}.{props.minor}"
        stamp["driver_l2_bytes"] = int(getattr(props, "L2_cache_size", 0)) or None
    return stamp


def stamp_label(stamp: dict) -> str:
    """One line for plot titles and banners: device, dtype-free versions and date."""
    extra = f", CUDA {stamp['cuda']}" if stamp.get("cuda") else f", {stamp['threads']} threads"
    return f"{stamp['device_name']} — torch {stamp['torch']}{extra}, {stamp['date_utc'][:10]}"

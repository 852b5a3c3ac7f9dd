"""The device for the whole course (CUDA when present, else CPU), and what a call costs on it.

:func:`peak_memory_bytes` (chapter 9, again in 19) lives here, on the package's face, so the
kernels below the benchmark floor (chapter 19's ring runner) import it down, not up;
:mod:`mha_course.benchmark.memory` re-exports it beside chapter 8's timing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import torch


def get_device(prefer: str | None = None) -> torch.device:
    """Return ``cuda`` when a GPU is available (or ``prefer`` says so), else ``cpu``.

    Nothing in the course requires a GPU; pass ``prefer="cpu"`` to force the CPU.
    """
    if prefer is not None:
        if prefer.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"prefer: asked for {prefer!r} but torch sees no CUDA device")
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe_device(device: torch.device | str | None = None) -> str:
    """A one-line hardware banner, e.g. ``cuda: NVIDIA H200`` or ``cpu: 2 threads``."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {torch.get_num_threads()} threads"


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the process's stderr file descriptor (C++ logging, not Python exceptions)."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes that torch tensors allocated (above the starting point) while ``fn()`` ran,
    on the CPU or GPU, from the profiler's allocation events (``profile_memory=True``).

    Python's ``tracemalloc`` cannot see torch's allocations; this replays every allocation and
    free in time order and keeps the running maximum. The allocator's caching and rounding make
    the number vary a little from machine to machine: print it in ignored cells.
    """
    from torch.profiler import profile

    prof = profile(profile_memory=True)
    with _quiet_stderr():  # the profiler's C++ side logs "profiler_start" lines to fd 2
        prof.__enter__()
    try:
        fn()
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()  # + for an allocation, - for a free
        peak = max(peak, current)
    return peak

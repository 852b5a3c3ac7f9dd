"""Chapter 9 (used again in 19): peak tensor memory of a call, measured with torch's profiler.

Where the rest of measuring lives (chapter 8's timing harness is :mod:`.timing`): chapter 9
compares the naive and tiled attention's peaks with it, chapter 19 each ring rank's.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable


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

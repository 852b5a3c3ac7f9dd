"""The grading process's own torch threads (see :func:`one_torch_thread`)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

_LOCAL = threading.local()  # per thread: open calls, and torch's thread count before the first


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """The parent's own torch work (references, mistake variants) in ONE intra-op thread while
    this thread grades a submission. Its tensors are small and the children keep the cores
    busy, so more threads mostly wait for each other and spin on the cores the children need
    (a class of 4 on a loaded 2-core machine: judging took 10x longer); the children run one
    thread too. Per calling thread (OpenMP keeps the count per thread: one that set its own
    does not see another's), restored when its outermost call ends."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    depth = getattr(_LOCAL, "depth", 0)
    if depth == 0:
        _LOCAL.before = torch.get_num_threads()
        torch.set_num_threads(1)
    _LOCAL.depth = depth + 1
    try:
        yield
    finally:
        _LOCAL.depth -= 1
        if _LOCAL.depth == 0:
            torch.set_num_threads(_LOCAL.before)

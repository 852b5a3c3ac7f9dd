"""A SIMULATION of a GPU's asynchronous launch, for teaching timing without a GPU.

A worker thread plays the device and ``time.sleep`` plays a kernel: ``launch()`` queues one
kernel and returns at once, ``synchronize()`` waits for everything queued. It is not a GPU and
says nothing about GPU speed; chapter 8 and its exercise use it to show why an unsynchronized
timer measures only the launches.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor


class SimulatedAsyncDevice:
    """Queue ``kernel_ms`` of "work" per launch; the first launch also pays ``first_extra_ms``
    of set-up (like a first call's compilation or allocation)."""

    def __init__(self, kernel_ms: float, first_extra_ms: float = 0.0) -> None:
        self._worker = ThreadPoolExecutor(max_workers=1)
        self._pending: list = []
        self.kernel_s, self.first_extra_s, self.calls = kernel_ms / 1e3, first_extra_ms / 1e3, 0

    def launch(self) -> None:
        extra = self.first_extra_s if self.calls == 0 else 0.0
        self.calls += 1
        self._pending.append(self._worker.submit(time.sleep, self.kernel_s + extra))

    def synchronize(self) -> None:
        for job in self._pending:
            job.result()
        self._pending.clear()

    def close(self) -> None:
        self.synchronize()
        self._worker.shutdown()

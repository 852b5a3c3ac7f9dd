"""SIMULATIONS of a GPU's asynchronous launch, for teaching timing without a GPU.

:class:`SimulatedAsyncDevice`: a worker thread plays the device and ``time.sleep`` plays a
kernel: ``launch()`` queues one kernel and returns at once, ``synchronize()`` waits for everything
queued (chapter 8 uses it to show why an unsynchronized host timer measures only the launches).

:class:`VirtualDevice`: the same queue on a virtual clock (nothing sleeps, fully deterministic),
with CUDA-like events recorded into the queue: exercise 8 times it with events, and the grader
serves one from outside the sandbox. Neither is a GPU; they say nothing about GPU speed.
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


class VirtualEvent:
    """A CUDA-like event on a :class:`VirtualDevice`: ``record()`` queues a timestamp, and
    ``start.elapsed_time(end)`` reads the device time between two events (ms) once the device
    has reached both (after a ``synchronize()``); before that it raises, as CUDA does."""

    def __init__(self, device: VirtualDevice) -> None:
        self._device = device
        self._at: int | None = None  # position in the device's queue
        self.time_ms: float | None = None  # the device clock when it reaches this event

    def record(self) -> None:
        self._at, self.time_ms = self._device._queue_event()

    def query(self) -> bool:
        """True once the device has reached this event (it was recorded, then synchronized)."""
        return self._at is not None and self._at < self._device._done

    def elapsed_time(self, end: VirtualEvent) -> float:
        """Device milliseconds from this event to ``end``."""
        if self._at is None or end._at is None:
            raise RuntimeError("elapsed_time: both events must be recorded first (event.record())")
        if not (self.query() and end.query()):
            raise RuntimeError(
                "elapsed_time: the device has not reached these events yet (device "
                "not ready): call synchronize() before reading them"
            )
        return end.time_ms - self.time_ms


class VirtualDevice:
    """A simulated asynchronous device on a VIRTUAL clock, with CUDA-like events.

    Nothing sleeps: kernels run back to back in launch order, and the device clock at a point of
    its queue is the sum of the kernel times queued before it. ``launch()`` queues one kernel and
    returns at once; ``Event().record()`` queues a timestamp; ``synchronize()`` waits for all of
    it (here: marks it done). A host clock around ``launch()`` therefore measures nothing of the
    work, as on a GPU; events read the device's own clock. Kernel ``k`` takes
    ``kernel_ms * (1 + jitter * e_k)`` (``e_k`` exponential: timings skew slow, like real ones),
    plus ``first_extra_ms`` on the first launch (set-up that warm-up keeps out of the samples).
    Deterministic for a ``seed``.
    """

    def __init__(
        self,
        kernel_ms: float,
        first_extra_ms: float = 0.0,
        jitter: float = 0.0,
        seed: int = 0,
        max_launches: int = 100_000,
    ) -> None:
        import numpy as np

        self._rng = np.random.default_rng(seed)
        self.kernel_ms, self.first_extra_ms, self.jitter = kernel_ms, first_extra_ms, jitter
        self.max_launches = max_launches
        self.durations_ms: list[float] = []
        self._clock = 0.0  # device time at the end of the queue
        self._ops = 0  # entries queued so far (kernels and events)
        self._done = 0  # entries the device has finished (set by synchronize)

    def launch(self) -> None:
        if len(self.durations_ms) >= self.max_launches:
            raise RuntimeError(f"launch: more than {self.max_launches} launches")
        d = self.kernel_ms * (1.0 + self.jitter * float(self._rng.standard_exponential()))
        if not self.durations_ms:
            d += self.first_extra_ms
        self.durations_ms.append(d)
        self._clock += d
        self._ops += 1

    def _queue_event(self) -> tuple[int, float]:
        self._ops += 1
        return self._ops - 1, self._clock

    def Event(self) -> VirtualEvent:  # noqa: N802 - named like torch.cuda.Event
        """A new event on this device (record it into the queue with ``record()``)."""
        return VirtualEvent(self)

    def synchronize(self) -> None:
        self._done = self._ops

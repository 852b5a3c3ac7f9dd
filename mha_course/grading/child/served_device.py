"""Exercise 8's simulated device, served by the grader: its clock and kernel times stay in the parent.

``DeviceService`` (PARENT) holds a :class:`~mha_course.benchmark.simulated.VirtualDevice` whose
kernel times are drawn from the student's secret inputs (hidden case values: a base time, a
seed for the spread, a first-call set-up cost), and logs every launch, event and read.
``RemoteDevice`` (CHILD) gives the learner's ``time_call`` what a GPU gives: ``launch`` (fn),
``Event`` (new_event: ``record()``, ``elapsed_time(end)``) and ``synchronize``. Nothing in the
sandbox knows a kernel time: the only way to learn one is an event pair around its launch,
read after a synchronize. The parent then judges from its own log (``DeviceService.judged``).

Requests (the proxy sends nothing else): ``launch`` {}, ``synchronize`` {}, ``new_event`` {}
-> {event: handle}, ``record`` {event}, ``elapsed`` {start, end} -> {ms} (a ``RuntimeError``
reply when either event is unrecorded or not yet reached, as CUDA raises).
"""

from __future__ import annotations

import numpy as np

from mha_course.benchmark.simulated import VirtualDevice, VirtualEvent
from mha_grader.sandbox import channel
from mha_grader.sandbox.channel import Refused, Violation, want_int, want_keys

MAX_LAUNCHES, MAX_EVENTS = 10_000, 20_000
NOT_SYNCHRONIZED = (
    "not synchronized: an event was read before the device reached it: record the "
    "events around fn(), then call synchronize() before elapsed_time() (as CUDA "
    "raises 'device not ready')"
)
NOT_RECORDED = (
    "an event was read before it was recorded: call start.record() and end.record() around fn()"
)


class DeviceService(channel.Service):
    """PARENT side: one case's device; ``judged`` compares the samples with the true kernel times."""

    def __init__(
        self,
        kernel_ms: float,
        first_extra_ms: float,
        jitter: float,
        seed: int,
        repeats: int,
        warmup: int,
    ) -> None:
        self.device = VirtualDevice(
            kernel_ms, first_extra_ms, jitter, seed, max_launches=MAX_LAUNCHES
        )
        self.repeats, self.warmup = repeats, warmup
        self.events: list[VirtualEvent] = []
        self.reads, self.early = 0, None

    def handle(self, op: str, args: dict) -> dict:
        if op in ("launch", "synchronize", "new_event"):
            want_keys(args)
            if op == "launch":
                if len(self.device.durations_ms) >= MAX_LAUNCHES:
                    raise Violation("too many launches")
                self.device.launch()
            elif op == "synchronize":
                self.device.synchronize()
            else:
                if len(self.events) >= MAX_EVENTS:
                    raise Violation("too many events")
                self.events.append(self.device.Event())
                return {"event": len(self.events) - 1}
            return {}
        n = len(self.events) - 1
        if op == "record":
            want_keys(args, "event")
            self.events[want_int(args, "event", 0, n)].record()
            return {}
        if op != "elapsed":
            raise Violation("not an op of the device")
        want_keys(args, "start", "end")
        start, end = (
            self.events[want_int(args, "start", 0, n)],
            self.events[want_int(args, "end", 0, n)],
        )
        try:
            ms = start.elapsed_time(end)
        except RuntimeError as e:
            self.early = self.early or (NOT_RECORDED if "recorded" in str(e) else NOT_SYNCHRONIZED)
            raise Refused(str(e), "RuntimeError") from None
        self.reads += 1
        return {"ms": ms}

    def judged(self, outputs: list) -> list:
        """[samples returned, warm-up launches before the timed ones, samples == the true times
        of the timed launches, == them in seconds, all equal to their mean, events read] (6,)."""
        s = np.asarray(outputs[0], dtype=np.float64).reshape(-1)
        d = np.asarray(self.device.durations_ms, dtype=np.float64)
        r = self.repeats
        timed = d[-r:] if len(d) >= r else np.full(r, np.nan)

        def same(a, b):
            return bool(a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-9))

        flags = [
            s.size,
            len(d) - r >= self.warmup,
            same(s, timed),
            same(s * 1e3, timed),
            same(s, np.full(r, timed.mean())) and not same(s, timed),
            self.reads > 0,
        ]
        return [np.array(flags, dtype=np.float64)]

    def failure_note(self) -> str | None:
        return self.early


class RemoteEvent:
    """CHILD side: an event of the grader's device (like ``torch.cuda.Event(enable_timing=True)``)."""

    def __init__(self, client: channel.Client) -> None:
        self._client = client
        self._handle = int(client.call("new_event")["event"])

    def record(self) -> None:
        self._client.call("record", event=self._handle)

    def elapsed_time(self, end: RemoteEvent) -> float:
        """Device milliseconds from this event to ``end`` (``RuntimeError`` before a synchronize)."""
        if not isinstance(end, RemoteEvent):
            raise TypeError(f"elapsed_time: expected an event, got {type(end).__name__}")
        return float(self._client.call("elapsed", start=self._handle, end=end._handle)["ms"])


class RemoteDevice:
    """CHILD side: the grader's simulated device, as ``launch`` / ``Event`` / ``synchronize``."""

    def __init__(self, client: channel.Client) -> None:
        self._client = client

    def launch(self) -> None:
        self._client.call("launch")

    def Event(self) -> RemoteEvent:  # noqa: N802 - named like torch.cuda.Event
        return RemoteEvent(self._client)

    def synchronize(self) -> None:
        self._client.call("synchronize")

"""The parent's clock over one child's stages: the progress stream it reads (``_Stream``) and
the clock that times each stage and sees a progress that learner code wrote (``_StageClock``).

The harness writes one line per stage (``child.main``'s ``mark``) to a pipe the parent reads;
each stage starts its allowance when the parent reads it, and must come later in the job's plan
of stages (``protocol.stage_plan``) than the one before. ``launch.py`` polls both.
"""

from __future__ import annotations

import os
import time

from mha_grader.sandbox import protocol


class _Stream:
    """The child's progress as the parent reads it: a pipe the harness writes one line to per
    stage (``child.main``'s ``mark``). A pipe, not a file rewritten in place: the parent reads
    EVERY line, in the order written, so a stage written twice - a cell that named a later
    stage to buy its allowance early, then the harness naming it again when it really starts -
    is seen, and no poll can miss it."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd, self._buf, self._left, self.broken = fd, b"", limit, False
        os.set_blocking(fd, False)

    def read(self) -> list[str]:
        """The complete lines written since the last call (``broken`` on a line too long or
        more bytes than the plan's stages can take)."""
        while not self.broken:
            try:
                chunk = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not chunk:
                break
            self._left -= len(chunk)
            self._buf += chunk
            if self._left < 0:
                self.broken = True
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > protocol.MAX_STAGE:
            self.broken = True
        return [line.decode("ascii", "replace").strip() for line in lines]


class _StageClock:
    """The parent's timing of a child's stages (``protocol.stage_plan``), by the parent's clock
    alone: a stage starts its allowance when the parent reads it from the progress stream
    (``_Stream``), and each stage must come LATER in the plan than the one before. The harness
    writes each stage once, in order; so a stage named again or out of order (a cell that named
    a later stage to start its allowance early: the harness names it again when it really
    starts), a stage not in the plan, or a line too long means that learner code writes the
    progress: ``tampered``, and no stage it named is trusted. A cell cannot stretch its own wall
    limit by naming later stages, and cannot go back to buy a stage's allowance twice."""

    def __init__(self, plan: list[str]) -> None:
        self._pos = {s: k for k, s in enumerate(plan)}
        self.stage, self._at, self._since, self.tampered = "", -1, time.monotonic(), False

    def saw(self, stream: _Stream, now: float) -> None:
        for stage in stream.read():
            k = self._pos.get(stage, -1)
            if self.tampered or k <= self._at:
                self.tampered = True
                return
            self.stage, self._at, self._since = stage, k, now
        self.tampered = self.tampered or stream.broken

    def overdue(self, now: float, item_timeout: float) -> bool:
        start_up = 30 if self._at <= 0 else 0  # before and during "setup" (imports)
        return now - self._since > item_timeout + start_up

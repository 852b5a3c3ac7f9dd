"""The parent's watch over one running child (``_Watch``), and a child held at its end (``Held``).

``launch.py`` starts the child; ``_Watch.run`` polls it until it exits or is stopped (a stage
past its wall limit, the student's deadline, tampered progress, the student's cgroup) and then
kills everything it started (``finish``). With ``hold`` it may instead stop watching a child
whose zygote reached ``done`` and waits for a second job (``child.main``, ``next_fd``): every
unit of it has ended, and the zygote kills every process a unit left before it says so. The
parent reads that job's results while it waits, then either hands it a next job (``Held.resume``:
the student's retries with the course's substitutes, ``runner.py``; no new interpreter, no second
``import torch``) or lets it exit (``Held.close``).

A held child runs only in bubblewrap with Landlock-confined units: its second job's staged
courses are linked into ``late/`` (bound read-only and empty at the start, so no unit of the
first job could see one); the parent removes the first job's results folders, and the zygote seals
any still there, before the next unit runs.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mha_grader.sandbox import cgroup, protocol, space
from mha_grader.sandbox.reap import _kill, unseal
from mha_grader.sandbox.stage_clock import _StageClock, _Stream

TAMPERED = "tampered"  # run_child's ``killed`` when learner code wrote the progress
DISK_FULL = "disk full"  # ... when the child filled its writable space (space.py)
OUT_OF_MEMORY = "out of memory"  # ... when its cgroup ran out of memory (cgroup.py)
TOO_MANY_PROCESSES = "too many processes"  # ... when a fork failed at its pids.max
CPU_BOUND = (
    "cpu bound"  # ... a stage ran past its limit while its processes competed for its CPU quota
)


@dataclass
class _Watch:
    """What the poll loop needs of one started child."""

    proc: subprocess.Popen
    inner: int | None  # the PID namespace's first process (bubblewrap), else None
    mode: str
    group: cgroup.Group | None
    stream: _Stream
    clock: _StageClock
    out: Path
    scratch: Path
    sized: bool
    limits: object  # launch.Limits
    deadline: float
    held_s: float = 0.0  # the cgroup's throttled seconds when this job started
    filled: bool = False
    ends: list = field(default_factory=list)  # descriptors to close with the child
    ctl: int | None = None  # the write end of a held child's next-job pipe (``hold``)
    ready: int | None = None  # the read end of its "waiting" pipe (only the zygote writes it)
    first: list = field(default_factory=list)  # the results folders of the job it held for

    def run(self, hold: bool) -> tuple[str | None, bool]:
        """Poll until the child exits or is stopped: (why it was stopped or None, paused). With
        ``hold``, a child whose clock accepted ``done`` and that still lives is left alive
        (paused) unless its space filled; else everything it started is killed."""
        killed, paused = None, False
        try:
            while self.proc.poll() is None:
                now = time.monotonic()
                self.clock.saw(self.stream, now)
                self.filled = self.filled or (
                    self.sized and (space.full(self.out) or space.full(self.scratch))
                )
                if self.clock.tampered:
                    killed = TAMPERED
                    break
                why = self.group.cause() if self.group is not None else None
                if why is not None:  # v1 has no memory.oom.group: the sandbox dies as one
                    killed = OUT_OF_MEMORY if why == cgroup.MEMORY else TOO_MANY_PROCESSES
                    break
                if hold and self.clock.stage == protocol.DONE and self._waiting():
                    if not (self.filled or self._full()):
                        paused = True
                        break
                    hold = False  # its space filled: no next job, it exits (DISK_FULL below)
                    self.no_next_job()
                if self.clock.overdue(now, self.limits.item_timeout) or now > self.deadline:
                    killed = "timeout"
                    g = self.group
                    if g is not None and (g.busy() >= 2 or g.throttled() - self.held_s >= 1.0):
                        killed = CPU_BOUND
                    break
                _wait_exit(self.proc, 0.05)
        finally:
            if not paused:
                self.finish()
        return killed, paused

    def _full(self) -> bool:
        from mha_grader.sandbox.child import DISK_FULL_FLAG

        return self.sized and (space.full(self.out) or os.path.lexists(self.out / DISK_FULL_FLAG))

    def outcome(self, killed: str | None) -> tuple[str, str | None, int | None]:
        """After ``run`` (not paused): (the last stage the clock accepted, why it was stopped,
        its exit code), with what only the end tells: tampered progress, the kernel's cgroup
        verdict, a filled space; the results folders get their names back (``unseal``)."""
        if self.clock.tampered and killed is None:
            killed = TAMPERED
        if killed is None and self.group is not None:  # the kernel acted after the last poll
            why = self.group.cause()
            if why is not None:
                killed = OUT_OF_MEMORY if why == cgroup.MEMORY else TOO_MANY_PROCESSES
        if killed is None and (self.filled or self._full()):
            killed = DISK_FULL
        unseal(self.out)
        return self.clock.stage, killed, self.proc.returncode

    def _waiting(self) -> bool:
        """Did the zygote say it waits for a next job (its own pipe: no unit can write it)?"""
        if self.ready is None:
            return False
        os.set_blocking(self.ready, False)
        try:
            return os.read(self.ready, 1) == b"w"
        except (BlockingIOError, OSError):
            return False

    def no_next_job(self) -> None:
        """Close the next-job pipe: a held zygote reads an empty job and exits."""
        if self.ctl is not None:
            _close_fd(self.ctl)
            self.ctl = None

    def finish(self) -> None:
        """Kill the child and everything it started; read what it wrote before it ended."""
        self.no_next_job()
        if self.ready is not None:
            _close_fd(self.ready)
            self.ready = None
        _kill(self.proc, self.inner, self.mode)
        if self.group is not None:
            self.group.kill_all()
        self.clock.saw(self.stream, time.monotonic())  # what it wrote before it ended
        for fd in self.ends:
            _close_fd(fd)
        self.ends.clear()


def _wait_exit(proc: subprocess.Popen, seconds: float) -> None:
    """Sleep up to ``seconds``, waking at once when ``proc`` exits (a pidfd, where the kernel
    has them): a finished child's worker does not idle out the rest of a poll."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        time.sleep(seconds)
        return
    try:
        poller = select.poll()  # (select.select refuses descriptors past 1023)
        poller.register(fd, select.POLLIN)
        poller.poll(seconds * 1000)
    finally:
        os.close(fd)


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Held:
    """A child paused at ``done`` (``_Watch.run`` with ``hold``): its zygote waits for its next
    job on the pipe whose write end is ``watch.ctl``. ``resume`` or ``close`` it, once."""

    def __init__(self, watch: _Watch, root: Path, late: Path) -> None:
        self.watch, self.root, self.late = watch, root, late
        self.done = self.closed = False
        self.inputs: dict = {}  # the arrays its job gave it (job.py): a next job uses no others

    def link_course(self, course: str, k: int) -> str:
        """``course`` (a staged folder) linked into ``late/`` as the ``k``-th: its path there."""
        dest = self.late / f"c{k}"
        shutil.copytree(course, dest, copy_function=_link_or_copy)
        return str(dest)

    def resume(self, spec: dict) -> tuple[str, str | None, int | None] | None:
        """Run ``spec``'s units (``notebooks``) in the held child; (last stage, killed, code)
        as ``run_child`` returns them, once the child has exited or was stopped; None if the
        child could not take the job (it is gone then: the caller runs it in a fresh one)."""
        if self.done:
            raise RuntimeError("a held child resumes once")
        self.done = True
        w = self.watch
        plan = protocol.stage_plan(spec)
        w.clock = _StageClock(plan)
        w.stream._left = (len(plan) + 1) * (protocol.MAX_STAGE + 1)
        w.held_s = w.group.throttled() if w.group is not None else 0.0
        w.filled, w.stream.broken, w.stream._buf = False, False, b""
        for name in w.first:  # read by the parent already: gone before any retry runs
            shutil.rmtree(w.out / name, ignore_errors=True)
        data = json.dumps({"notebooks": spec["notebooks"]}).encode()
        gone = w.ctl is None or w.proc.poll() is not None
        wait = min(30.0, w.deadline - time.monotonic())
        if gone or len(data) > protocol.NEXT_JOB_BYTES or not _write_all(w.ctl, data, wait):
            w.finish()
            return None
        w.no_next_job()  # the end of the job: the zygote reads to here
        killed, _ = w.run(hold=False)
        return w.outcome(killed)

    def close(self) -> None:
        """No next job: the zygote reads an empty one and exits; everything is then killed and
        the run's space released (once; also after ``resume``)."""
        if self.closed:
            return
        self.closed = True
        if not self.done:
            self.done = True
            self.watch.finish()  # (the zygote reads an empty job first)
        unseal(self.watch.out)
        space.release(self.root)


def _write_all(fd: int, data: bytes, seconds: float) -> bool:
    """Write ``data`` to the pipe ``fd`` within ``seconds`` (the zygote reads as we write)."""
    os.set_blocking(fd, False)
    end, view = time.monotonic() + seconds, memoryview(data)
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while view:
        left = end - time.monotonic()
        if left <= 0:
            return False
        if poller.poll(left * 1000):
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except OSError:
                return False
    return True


def _link_or_copy(src: str, dest: str) -> None:
    try:
        os.link(src, dest)
    except OSError:  # another file system
        shutil.copy2(src, dest)

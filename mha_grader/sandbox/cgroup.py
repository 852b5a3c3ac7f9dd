"""One student's sandbox is one accounted unit: a cgroup the grader makes, limited from outside.

Per-process limits (``RLIMIT_AS``, ``RLIMIT_CPU``) do not bound a student who starts many
processes: thirty small ones steer the kernel's OOM killer onto a classmate's large process,
sixty busy loops each get their own CPU allowance (issue #30). So each student's sandbox runs in
its own cgroup, made by the grader inside the grader's own cgroup (so whatever bounds the grader
-- a container, a test's cgroup -- still bounds the whole class), with:

- memory: ``memory.limit_in_bytes`` (v1) / ``memory.max`` with ``memory.oom.group`` (v2): an
  OOM is the student's own cgroup's OOM, whose victim the kernel picks among that student's
  processes only; on v1, which has no ``oom.group``, the parent then kills the whole sandbox
  (``cause`` reports it), so a student's processes die together in both;
- processes: ``pids.max`` (threads count too);
- CPU: ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (v1) / ``cpu.max`` (v2), ``Limits.student_cpus``
  cores for all of a student's processes together, and equal weights, so busy loops slow only
  the student who started them.

The sandbox's first process writes its own pid into each ``cgroup.procs`` before it execs
anything (``argv``: a ``/bin/sh`` prefix for bubblewrap; ``enter`` in a ``preexec_fn``), so
every process the submission starts is inside. ``remove`` kills whatever is left and removes
the cgroup when the student is done.

Where no cgroup can be made (not root, a read-only ``/sys/fs/cgroup``, a v2 hierarchy without
delegated controllers), ``problem()`` says why in one line; the class grader prints it and
records it in ``grading.json`` (``"resource_control"``), and the per-process limits remain
(see the instructor guide, "Per-student bounds"). ``MHA_GRADER_CGROUPS=off`` turns cgroups off.

Here: whether a cgroup per student can be made (``problem``, ``status``), each student's memory
(``budget``, ``fit``), the student's own cause in words (``message``), stale cgroups swept
(``sweep_stale``) and one student's cgroup while grading (``student``). Where cgroups can be made
and what one is (``Group``) is ``cgroup_tree.py``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from mha_grader.sandbox.cgroup_tree import (  # noqa: F401 - re-exported: cgroup.py's names before its split
    ENV_VAR,
    MEMORY,
    MOUNT,
    PERIOD_US,
    PREFIX,
    PROCESSES,
    SLACK_PIDS,
    V1,
    Bounds,
    Group,
    _layout,
)


def problem() -> str | None:
    """``None`` if a cgroup per student can be made here, else why not (one line)."""
    kind, got = _layout()
    return None if kind else str(got)


def status(bounds: Bounds | None) -> str:
    """For ``grading.json`` and the grader's start-up line."""
    why = problem()
    if why is not None:
        return (
            f"NO cgroup per student ({why}): per-process limits only (address space, CPU time, "
            "processes per uid where the sandbox runs as one); see the instructor guide"
        )
    kind, _ = _layout()
    return f"a cgroup per student ({kind}): " + (bounds.describe() if bounds else "")


def budget() -> int:
    """The memory the grader and its sandboxes may use together: the smallest limit of the
    grader's own memory cgroups (up to the root) and the machine's memory."""
    try:
        total = next(
            int(line.split()[1]) * 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
    except (OSError, StopIteration, ValueError):
        total = 1 << 62
    limits = [total]
    kind, got = _layout()
    if kind:
        root = MOUNT / "memory" if kind == "v1" else MOUNT
        p, name = (got["memory"], "memory.limit_in_bytes") if kind == "v1" else (got, "memory.max")
        while True:
            with contextlib.suppress(OSError, ValueError):  # v2 says "max" for none
                limits.append(int((p / name).read_text().strip()))
            if p == root or root not in p.parents:
                break
            p = p.parent
    return min(limits)


def fit(memory: int, workers: int, reserve: int) -> int:
    """One student's memory: at most ``memory``, and small enough that ``workers`` sandboxes
    and the grader (``reserve``) fit in ``budget()`` -- so a full sandbox is its own OOM, never
    the container's, whose victim could be a classmate."""
    return max(64 * 2**20, min(memory, (budget() - reserve) // max(1, workers)))


CPU = "cpu"


def message(what: str, bounds: Bounds) -> str:
    """The student's own cause (``MEMORY``, ``PROCESSES``, ``CPU``), in the parent's words."""
    if what == MEMORY:
        return (
            f"out of memory: this submission's processes together used all of the "
            f"{bounds.memory / 2**20:.0f} MiB one student's sandbox may use; all of them were stopped"
        )
    if what == PROCESSES:
        return (
            f"too many processes: this submission tried to run more than the {bounds.pids} "
            "processes (and threads) one student's sandbox may use; all of them were stopped"
        )
    return (
        f"took too long while this submission's processes wanted more CPU than the "
        f"{bounds.cpus:g} core(s) one student's sandbox may use (busy processes it started?)"
    )


def sweep_stale() -> list[str]:
    """Remove the empty cgroups graders that died left (``mha-student-<pid>-<n>`` whose grader
    pid is gone); a cgroup that still holds a process is never removed (rmdir refuses)."""
    kind, got = _layout()
    if not kind:
        return []
    bases = list(got.values()) if kind == "v1" else [got]
    gone = []
    for base in bases:
        for p in base.glob(f"{PREFIX}*"):
            with contextlib.suppress(ValueError, IndexError):
                pid = int(p.name[len(PREFIX) :].split("-")[0])
                if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                    with contextlib.suppress(OSError):
                        p.rmdir()
                        gone.append(str(p))
    return gone


@contextlib.contextmanager
def student(bounds: Bounds):
    """A cgroup for one student's sandbox while grading it (``None`` where none can be made);
    everything in it is killed and the cgroup removed at the end."""
    if problem() is not None:
        yield None
        return
    try:
        g = Group.make(bounds)
    except OSError:
        yield None
        return
    try:
        yield g
    finally:
        g.remove()

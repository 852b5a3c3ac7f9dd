"""What one child may use, and how its process is held to it (the parent's side).

``Limits``: the resource limits of one child and of the student's sandbox as a whole (the
defaults of ``mha-course grade``). ``_rlimits`` are the child's own resource limits, set either
by util-linux's tools as a command prefix (``_limit_argv``, for a child that keeps our uid:
bubblewrap) or in a ``preexec_fn`` (``_preexec``: the student's cgroup, sized scratch space, the
OOM killer's choice, death with the grader and, in mode "user", the dedicated uid).
``launch.py`` starts the child with them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from mha_grader.sandbox import cgroup, isolation, nonet, space

try:
    import resource  # POSIX only: the child's resource limits
except ImportError:  # Windows: check("exNN") in a notebook still works; isolation needs POSIX
    resource = None


@dataclass(frozen=True)
class Limits:
    """Resource limits for one child; ``memory_gb`` is the address-space limit.

    Wall time: ``item_timeout`` per stage (a cell, or an item with all its cases), and one
    deadline per student, ``min(student_timeout, notebook_timeout * notebooks)``, restarts
    included, that no amount of sleeping stretches. CPU time: ``item_cpu`` seconds per stage
    (RLIMIT_CPU, re-armed by the harness before each stage) within ``cpu_seconds`` per notebook.
    Writable space: ``disk_mb`` MiB of temp and ``result_mb`` MiB of results, ``disk_files``
    files each, per child run (``space.py``); ``result_mb`` is also what the parent reads back
    per student, all runs together.
    The student's sandbox as a whole (every process it starts, its scanner, its tmpfs pages):
    ``student_memory_gb`` of memory (lowered by the class grader so that every worker's sandbox
    and the grader fit in the memory it may use, ``cgroup.fit``), ``processes`` (+ the sandbox's
    own few) and ``student_cpus`` cores, kept by the kernel in a cgroup per student
    (``cgroup.py``) where one can be made.
    These defaults are also the defaults of ``mha-course grade``.
    """

    memory_gb: float = 4.0
    item_timeout: float = 20.0
    notebook_timeout: float = 180.0
    cpu_seconds: int = 120
    file_mb: int = 64
    processes: int = 64
    item_cpu: float = 20.0
    student_timeout: float = 300.0
    disk_mb: int = 128  # temp space (files, shared memory) of one child run: see space.py
    disk_files: int = 4096  # files (inodes) in it, and in its results folder
    result_mb: int = 64  # bytes of results the parent reads back per student (and per run)
    student_memory_gb: float = 4.0  # one student's cgroup: all its processes together
    student_cpus: float = 1.0  # ... and the CPU cores they share (CFS quota)

    def bounds(self) -> cgroup.Bounds:
        """What one student's cgroup may use (``cgroup.py``)."""
        return cgroup.Bounds(
            int(self.student_memory_gb * 2**30),
            self.processes + cgroup.SLACK_PIDS,
            self.student_cpus,
        )


def _user_tasks() -> int:
    """Threads + processes this user already runs (RLIMIT_NPROC counts them all)."""
    n, uid = 0, os.getuid()
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if p.stat().st_uid == uid:
                n += len(list((p / "task").iterdir()))
    return n


def _rlimits(limits: Limits, nproc: int, notebooks: int) -> dict[str, tuple[int, int]]:
    """The child's resource limits (soft, hard), by ``resource.RLIMIT_<name>``."""
    cpu = int(limits.cpu_seconds * max(1, notebooks))
    mem, size = int(limits.memory_gb * 2**30), limits.file_mb * 2**20
    return {
        "AS": (mem, mem),
        "CPU": (cpu, cpu + 5),
        "FSIZE": (size, size),
        "CORE": (0, 0),
        "NPROC": (nproc, nproc),
    }


def _limit_argv(limits: Limits, nproc: int, notebooks: int) -> list[str] | None:
    """What ``_preexec`` does for a child that keeps our uid (bubblewrap), as a command prefix of
    util-linux's tools, each setting it on itself and then exec-ing the next: ``choom`` (the
    kernel's OOM killer picks the child first), ``setpriv --pdeathsig`` (die with the grading
    thread) and ``prlimit`` (the limits). Without a ``preexec_fn``, Python starts the child by
    ``vfork`` instead of copying the grader's page tables (~40 ms and 20 ms of system CPU per
    child for a 0.5-GB grader, twice per student). ``None`` where one of the tools is missing."""
    tools = [shutil.which(t) for t in ("choom", "setpriv", "prlimit")]
    if not all(tools):
        return None
    choom, setpriv, prlimit = tools
    flags = [
        f"--{name.lower()}={soft}:{hard}"
        for name, (soft, hard) in _rlimits(limits, nproc, notebooks).items()
    ]
    return [choom, "-n", "1000", "--", setpriv, "--pdeathsig", "KILL", "--", prlimit, *flags, "--"]


def _preexec(
    limits: Limits, nproc: int, notebooks: int, uid: int | None, group: cgroup.Group | None = None
):
    scratch = limits.disk_mb * 2**20
    rlimits = _rlimits(limits, nproc, notebooks)

    def apply() -> None:
        if group is not None:  # the student's cgroup, before anything else (and while root)
            group.enter()
        if (
            uid is not None
        ):  # mode "user" (root): no host scratch folder is writable, only sized ones
            space.private_scratch(scratch, limits.disk_files)
        with contextlib.suppress(OSError):  # under memory pressure the kernel kills a child first
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        for name in ("AS", "CPU", "FSIZE", "CORE"):
            resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), rlimits[name])
        if sys.platform.startswith("linux"):  # die with the grader, even if it is killed
            with contextlib.suppress(Exception):
                import ctypes

                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if uid is not None:
            nonet.new_namespace()  # where the kernel lets root (the child's filter holds anyway)
            isolation.become(uid)
        resource.setrlimit(resource.RLIMIT_NPROC, rlimits["NPROC"])

    return apply

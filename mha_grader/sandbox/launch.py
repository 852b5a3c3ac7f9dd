"""Start and stop one sandboxed child (the parent side of the process boundary).

The child is ``python -I -S`` running the STAGED engine (``mha_grader.sandbox.child``), isolated as
``isolation.py`` describes (bubblewrap, a dedicated user, or - only when asked - nothing), with
resource limits (address space, CPU time, file size, processes), a clean environment and
stdout/stderr discarded. The parent watches its progress file, kills it when a stage runs past
its wall limit or the student's deadline, and returns only when every process the submission
started is gone; only then are its results read (``protocol.py``). What to run and how to score
it is ``runner.py``'s job.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_grader.sandbox import cgroup, isolation, nonet, protocol, reach, space
from mha_grader.stage import Stager

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


TAMPERED = "tampered"  # run_child's ``killed`` when learner code wrote the progress
DISK_FULL = "disk full"  # ... when the child filled its writable space (space.py)
OUT_OF_MEMORY = "out of memory"  # ... when its cgroup ran out of memory (cgroup.py)
TOO_MANY_PROCESSES = "too many processes"  # ... when a fork failed at its pids.max
CPU_BOUND = (
    "cpu bound"  # ... a stage ran past its limit while its processes competed for its CPU quota
)
_DEBUG = bool(os.environ.get("MHA_GRADER_DEBUG"))  # show the child's stderr (for maintainers)
_STAGE_LOCK = threading.Lock()
_STAGER: Stager | None = None


def stager() -> Stager:
    """The process-wide cache of staged packages (a world-readable temp folder, removed at exit)."""
    global _STAGER
    with _STAGE_LOCK:
        if _STAGER is None:
            space.sweep_stale()  # what a grader that was killed left behind
            root = Path(tempfile.mkdtemp(prefix=f"mha-stage-{os.getpid()}-"))
            space.hold(root)  # alive while we are (space.sweep_stale)
            os.chmod(root, 0o711)  # enter, not list: a child finds only the folders it is given
            atexit.register(shutil.rmtree, root, True)
            _STAGER = Stager(root)
        return _STAGER


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


def _env(home: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": home,
        "MHA_GRADING_CHILD": "1",
        # Triton kernels (ex17) run in Triton's CPU interpreter: set from the start, since a
        # preload (torch.utils.flop_counter) or another notebook may import triton first.
        "TRITON_INTERPRET": "1",
    }
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    return env


_BOOT = (
    "import sys; sys.path[:0] = [sys.argv[1]]; import mha_grader.sandbox.child as c; "
    "c.main(sys.argv[2], sys.argv[3])"
)


def _read_info(fd: int, timeout: float = 30.0) -> int | None:
    """bwrap's --info-fd JSON: the pid (in our namespace) of the sandbox's first process."""
    data, end = b"", time.monotonic() + timeout
    os.set_blocking(fd, False)
    while time.monotonic() < end:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            chunk = None
        if chunk:
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data.decode())["child-pid"])
        elif chunk == b"":
            break
        time.sleep(0.005)
    return None


def _gone(pid: int | None, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while pid and os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def run_child(
    root: Path,
    spec: dict,
    arrays: dict[str, np.ndarray],
    limits: Limits,
    deadline: float,
    mode: str,
    pass_fds: list[int] = (),
    group: cgroup.Group | None = None,
) -> tuple[str, str | None, int | None]:
    """See ``_run_child``; the progress stream's pipe (``_Stream``) is closed however it ends."""
    pipe = list(os.pipe())
    try:
        return _run_child(root, spec, arrays, limits, deadline, mode, pass_fds, pipe, group)
    finally:
        _close(pipe)


def _close(pipe: list[int | None], *which: int) -> None:
    """Close ``pipe``'s ends (``which``, or both) once each: a number closed twice could be
    another thread's descriptor by then."""
    for k in which or range(len(pipe)):
        if pipe[k] is not None:
            with contextlib.suppress(OSError):
                os.close(pipe[k])
            pipe[k] = None


def _run_child(
    root: Path,
    spec: dict,
    arrays: dict[str, np.ndarray],
    limits: Limits,
    deadline: float,
    mode: str,
    pass_fds: list[int],
    pipe: list[int | None],
    group: cgroup.Group | None = None,
) -> tuple[str, str | None, int | None]:
    """Run one child on ``spec`` in ``root/{job,out}``; returns (last stage, killed, code).

    ``pass_fds``: descriptors the child inherits (the evidence channels' sockets, channel.py);
    bubblewrap passes inherited descriptors through to the sandboxed process.

    ``killed`` is ``"timeout"`` when we stopped a stage that ran past ``limits.item_timeout``
    (start-up gets 30 s more) or the ``deadline``, ``DISK_FULL`` when it filled its sized
    writable space (``space.py``; the caller then calls ``space.release(root)`` after reading the
    results), ``TAMPERED`` when the child's progress went
    back or off the plan (learner code wrote it); with the student's cgroup ``group``
    (``cgroup.py``: every process of the child starts in it), ``OUT_OF_MEMORY`` or
    ``TOO_MANY_PROCESSES`` when the kernel stopped it there (the whole sandbox is then stopped:
    its processes die together), ``CPU_BOUND`` for a timeout while several of its processes
    competed for its CPU quota (or the quota held it back for a second or more).
    The stage returned is the last one the
    parent's clock accepted (see ``_StageClock``). When this returns, every process of the
    child is dead (its PID namespace, or every process of its uid, is gone).
    """
    if resource is None or os.name != "posix":
        raise RuntimeError(
            "grading a saved notebook needs Linux or macOS (resource limits and "
            "process groups); on Windows use WSL, or check('exNN') in the notebook"
        )
    job, out, scratch = root / "job", root / "out", root / "scratch"
    home, shm = scratch / "home", scratch / "shm"
    for d in (job, out, scratch):
        d.mkdir(parents=True)
    sized = space.mount_run(root, out, scratch, limits)
    for d in (home, shm):
        d.mkdir()
    os.chmod(root, 0o700)
    os.chmod(job, 0o755)
    python = isolation.interpreter(mode)
    engine = str(stager().engine())
    prog_r, prog_w = pipe  # the progress stream (``_Stream``): the child inherits prog_w
    spec = {**spec, "no_network": mode != "none", "progress_fd": prog_w}
    if mode == "user":  # the child reads only these, and never the installed course (reach.py)
        problem = reach.user_problem(isolation._traversable)
        if problem:
            raise isolation.IsolationUnavailable(problem)
        if reach.landlock_problem() is None:
            spec = {
                **spec,
                "reads": {
                    "roots": reach.user_roots(
                        python, [engine, str(job), str(out), str(home), *spec["read_only"]]
                    ),
                    "hide": reach.hidden(),
                },
            }
    (job / "job.json").write_text(json.dumps(spec), encoding="utf-8")
    with open(job / "inputs.npz", "wb") as f:
        np.savez(f, **arrays)
    for p in job.iterdir():
        os.chmod(p, 0o644)
    cmd = [python, "-I", "-S", "-c", _BOOT, engine, str(job), str(out)]
    lease = isolation.UIDS.lease() if mode == "user" else contextlib.nullcontext(None)
    with lease as uid:
        info_r = info_w = None
        if mode == "bwrap":
            info_r, info_w = os.pipe()
            ro = [engine, str(job), *spec["read_only"], *isolation.site_packages()]
            binds = {"/tmp": str(home), "/dev/shm": str(shm)} if sized else None
            cmd = [
                *isolation.bwrap_argv(
                    python, ro, [str(out)], _env("/tmp"), info_w, binds, limits.disk_mb * 2**20
                ),
                *cmd,
            ]
            env = {}
            nproc = _user_tasks() + limits.processes
        elif mode == "user":
            isolation.check_readable_by_user(
                [python, engine, *spec["read_only"], *isolation.site_packages()]
            )
            os.chown(root, 0, uid)  # only this uid (as group) may enter this run's folder
            os.chmod(root, 0o750)
            for d in (out, home, shm):
                os.chown(d, uid, uid)
                os.chmod(d, 0o700)
            env, nproc = _env(str(home)), limits.processes
        else:
            env, nproc = _env(str(home)), _user_tasks() + limits.processes
        if mode == "none":
            _become_subreaper()
        prefix = _limit_argv(limits, nproc, len(spec["notebooks"])) if mode == "bwrap" else None
        if prefix is not None and group is not None:
            prefix = [*group.argv(), *prefix]
        if group is not None:
            group.mark()
            held = group.throttled()
        with _LOCK:
            proc = subprocess.Popen(
                [*(prefix or []), *cmd],
                cwd=home if mode != "bwrap" else None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=None if _DEBUG else subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                pass_fds=(*((info_w,) if info_w is not None else ()), prog_w, *pass_fds),
                preexec_fn=None
                if prefix
                else _preexec(limits, nproc, len(spec["notebooks"]), uid, group),
            )
            _LIVE.add(proc.pid)
        _close(pipe, 1)
        inner = None
        if info_w is not None:
            os.close(info_w)
            inner = _read_info(info_r)
            os.close(info_r)
        plan = protocol.stage_plan(spec)
        clock = _StageClock(plan)
        stream = _Stream(prog_r, (len(plan) + 1) * (protocol.MAX_STAGE + 1))
        killed, filled = None, False
        try:
            while proc.poll() is None:
                now = time.monotonic()
                clock.saw(stream, now)
                filled = filled or (sized and (space.full(out) or space.full(scratch)))
                if clock.tampered:
                    killed = TAMPERED
                    break
                why = group.cause() if group is not None else None
                if why is not None:  # v1 has no memory.oom.group: the sandbox dies as one
                    killed = OUT_OF_MEMORY if why == cgroup.MEMORY else TOO_MANY_PROCESSES
                    break
                if clock.overdue(now, limits.item_timeout) or now > deadline:
                    killed = "timeout"
                    if group is not None and (group.busy() >= 2 or group.throttled() - held >= 1.0):
                        killed = CPU_BOUND
                    break
                time.sleep(0.05)
        finally:
            _kill(proc, inner, mode)
            if group is not None:
                group.kill_all()
            clock.saw(stream, time.monotonic())  # what it wrote before it ended
        if clock.tampered and killed is None:
            killed = TAMPERED
        if (
            killed is None and group is not None
        ):  # the kernel acted between the last poll and the end
            why = group.cause()
            if why is not None:
                killed = OUT_OF_MEMORY if why == cgroup.MEMORY else TOO_MANY_PROCESSES
    from mha_grader.sandbox.child import (
        DISK_FULL_FLAG,  # the zygote looked before it cleared each unit's files
    )

    filled = filled or (sized and (space.full(out) or os.path.lexists(out / DISK_FULL_FLAG)))
    if killed is None and filled:
        killed = DISK_FULL
    unseal(out)
    return clock.stage, killed, proc.returncode


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


def unseal(out: Path) -> None:
    """After the child is gone: give back their names to the results folders the harness hid
    from later units (``child._seal``) when it was killed before it could (checked: plain
    names, real folders, nothing overwritten)."""
    import re

    from mha_grader.sandbox.child import SEALED

    try:
        st = os.lstat(out / SEALED)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > 65536:
            return
        names = json.loads((out / SEALED).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return
    if not isinstance(names, dict):
        return
    for name, hidden in names.items():
        if not (
            isinstance(name, str)
            and isinstance(hidden, str)
            and re.fullmatch(r"u\d{1,6}", name)
            and re.fullmatch(r"\.[0-9a-f]{32}", hidden)
        ):
            continue
        src, dest = out / hidden, out / name
        with contextlib.suppress(OSError):
            if os.path.isdir(src) and not os.path.islink(src) and not os.path.lexists(dest):
                os.rename(src, dest)


def _become_subreaper() -> None:
    """Mode "none" only: orphans of a child (double fork + setsid) come back to us to be killed."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


_LIVE: set[int] = set()  # mode "none": pids of children we are running
_LOCK = threading.Lock()


def _sweep_orphans() -> None:
    """Mode "none": kill processes re-parented to us that a grading child started (best effort:
    without a sandbox a submission can still hide, e.g. by changing its environment and name)."""
    me = os.getpid()
    with _LOCK:
        for _ in range(5):
            found = False
            for p in Path("/proc").glob("[0-9]*"):
                try:
                    ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    pid = int(p.name)
                    ours = any(
                        b"mha_grader.sandbox.child" in (p / n).read_bytes()
                        or b"MHA_GRADING_CHILD=1" in (p / n).read_bytes()
                        for n in ("cmdline", "environ")
                    )
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == me and pid not in _LIVE and ours:
                    found = True
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                    with contextlib.suppress(OSError):
                        os.waitpid(pid, 0)
            if not found:
                return


def _kill(proc: subprocess.Popen, inner: int | None, mode: str) -> None:
    """Kill the child and everything it started; return when they are gone."""
    if inner is not None:  # the PID namespace's first process: the kernel kills the rest
        with contextlib.suppress(OSError):
            os.kill(inner, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=30)
    _gone(inner)
    if inner is not None:
        with contextlib.suppress(OSError):
            os.waitpid(inner, os.WNOHANG)  # if it was re-parented to us
    _LIVE.discard(proc.pid)
    if mode == "none":
        _sweep_orphans()
    # mode "user": the uid lease kills every process of the uid when it ends (after this).

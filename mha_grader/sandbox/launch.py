"""Start and stop one sandboxed child (the parent side of the process boundary).

The child is ``python -I -S`` running the STAGED engine (``mha_grader.sandbox.child``), isolated as
``isolation.py`` describes (bubblewrap, a dedicated user, or - only when asked - nothing), with
resource limits (address space, CPU time, file size, processes), a clean environment and
stdout/stderr discarded. The parent watches its progress file, kills it when a stage runs past
its wall limit or the student's deadline, and returns only when every process the submission
started is gone; only then are its results read (``protocol.py``). What to run and how to score
it is ``runner.py``'s job.

Here: ``run_child`` (the command line, the environment, the poll loop) and the process-wide cache
of staged packages (``stager``). What a child may use and how its process is held to it is
``limits.py``; the clock over its stages ``stage_clock.py``; killing it and what comes after
``reap.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from mha_grader.sandbox import cgroup, isolation, protocol, reach, space
from mha_grader.sandbox.limits import (  # noqa: F401 - re-exported: launch.py's names before its split
    Limits,
    _limit_argv,
    _preexec,
    _rlimits,
    _user_tasks,
)
from mha_grader.sandbox.reap import _LIVE, _LOCK, _become_subreaper, _read_info, unseal  # noqa: F401
from mha_grader.sandbox.stage_clock import _StageClock, _Stream
from mha_grader.sandbox.watch import (  # noqa: F401 - re-exported: launch.py's names before its split
    CPU_BOUND,
    DISK_FULL,
    OUT_OF_MEMORY,
    TAMPERED,
    TOO_MANY_PROCESSES,
    Held,
    _Watch,
)
from mha_grader.stage import Stager

try:
    import resource  # POSIX only: the child's resource limits
except ImportError:  # Windows: check("exNN") in a notebook still works; isolation needs POSIX
    resource = None

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
            _STAGER = Stager(root, hold=space.hold)
        return _STAGER


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


def run_child(*args, **kwargs) -> tuple[str, str | None, int | None]:
    """``run_child_held``'s outcome, never held: (last stage, killed, code); see ``_run_child``.
    The progress stream's pipe (``_Stream``) is closed however it ends."""
    return run_child_held(*args, **kwargs)[0]


def run_child_held(
    root: Path,
    spec: dict,
    arrays: dict[str, np.ndarray],
    limits: Limits,
    deadline: float,
    mode: str,
    pass_fds: list[int] = (),
    group: cgroup.Group | None = None,
    hold: bool = False,
) -> tuple[tuple[str, str | None, int | None], Held | None]:
    """``run_child``'s outcome, and with ``hold`` (bubblewrap, Landlock-confined units) the
    child itself when it reached ``done``: paused, waiting for a next job (``watch.Held``), its
    results ready to read. The caller resumes or closes it (and only then releases ``root``)."""
    pipe = list(os.pipe())
    held_ok = hold and mode == "bwrap" and spec.get("confine")
    # the next job's pipe (the child reads) and the "waiting" pipe (the zygote writes)
    ctl = [*os.pipe(), *os.pipe()] if held_ok else [None] * 4
    held = None
    try:
        outcome, held = _run_child(
            root, spec, arrays, limits, deadline, mode, pass_fds, pipe, group, ctl
        )
        return outcome, held
    finally:
        if held is None:
            _close(pipe)
        _close(ctl)  # (what a held child's watch keeps was taken out of it)


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
    ctl: list[int | None] = (None, None, None, None),
) -> tuple[tuple[str, str | None, int | None], Held | None]:
    """Run one child on ``spec`` in ``root/{job,out}``; returns (last stage, killed, code), and
    the child held at ``done`` when ``ctl`` (the next job's pipe) is given (``watch.Held``).

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
    late = root / "late"  # a held child's next courses are linked here (watch.Held)
    if ctl[0] is not None:
        late.mkdir()
        os.chmod(late, 0o755)
        spec = {
            **spec,
            "next_fd": ctl[0],
            "ready_fd": ctl[3],
            "read_only": [*spec["read_only"], str(late)],
        }
        pass_fds = (*pass_fds, ctl[0], ctl[3])
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
        watch = _Watch(
            proc,
            inner,
            mode,
            group,
            _Stream(prog_r, (len(plan) + 1) * (protocol.MAX_STAGE + 1)),
            _StageClock(plan),
            out,
            scratch,
            sized,
            limits,
            deadline,
            held_s=held if group is not None else 0.0,
        )
        if ctl[0] is not None:
            _close(ctl, 0, 3)  # the child holds these ends; the watch, the others
            watch.ctl, watch.ready, ctl[1], ctl[2] = ctl[1], ctl[2], None, None
        killed, paused = watch.run(hold=watch.ctl is not None)
        if paused:
            watch.first = [nb["dir"] for nb in spec["notebooks"]]
            watch.ends.append(prog_r)
            pipe[0] = None
            return (watch.clock.stage, None, None), Held(watch, root, late)
    return watch.outcome(killed), None

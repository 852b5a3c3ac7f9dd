"""Start and stop the sandboxed child (the parent side of the process boundary).

The child is ``python -I -m mha_grader.child`` in a fresh temporary folder, with a
clean environment, resource limits (address space, CPU time, file size, processes), its own
session (process group) and stdout/stderr discarded. The parent watches its progress file and
kills the whole group when a stage runs too long; orphans it adopted (the grader is a child
subreaper on Linux) are killed too. What to run and how to score it is ``runner.py``'s job.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import resource  # POSIX only: the child's resource limits
except ImportError:  # Windows: check("exNN") in a notebook still works; isolation needs POSIX
    resource = None


@dataclass(frozen=True)
class Limits:
    """Resource limits for one child; ``memory_gb`` is the address-space limit."""

    memory_gb: float = 4.0
    item_timeout: float = 20.0  # wall seconds per item (all its cases) and per cell
    notebook_timeout: float = 120.0  # wall seconds for the whole notebook, restarts included
    cpu_seconds: int = 120  # per notebook in the child
    file_mb: int = 64
    processes: int = 64  # on top of what the user already runs (not enforced for root)


def _user_tasks() -> int:
    """Threads + processes this user already runs (RLIMIT_NPROC counts them all)."""
    n, uid = 0, os.getuid()
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if p.stat().st_uid == uid:
                n += len(list((p / "task").iterdir()))
    return n


def _preexec(limits: Limits, nproc: int, notebooks: int = 1):
    cpu = limits.cpu_seconds * max(1, notebooks)

    def apply() -> None:
        mem = int(limits.memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        size = limits.file_mb * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sys.platform.startswith("linux"):  # die with the grader, even if it is killed
            with contextlib.suppress(Exception):
                import ctypes
                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    return apply


def _become_subreaper() -> None:
    """Orphans of a child (double fork + setsid) are re-parented to us, so we can kill them."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


_LIVE: set[int] = set()  # pids of children we are running (other workers' children are safe)
_LOCK = threading.Lock()  # no orphan sweep between a Popen and its registration in _LIVE


def _is_ours(proc_dir: Path) -> bool:
    """Started by a grading child: its environment or command line says so."""
    for name in ("environ", "cmdline"):
        with contextlib.suppress(OSError):
            data = (proc_dir / name).read_bytes()
            if b"MHA_GRADING_CHILD=1" in data or b"mha_grader.child" in data:
                return True
    return False


def _kill_orphans() -> None:
    """Kill processes re-parented to us that are not one of our live children."""
    me = os.getpid()
    with _LOCK:
        _sweep(me)


def _sweep(me: int) -> None:
    for _ in range(5):
        found = False
        for p in Path("/proc").glob("[0-9]*"):
            try:
                stat = (p / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            pid = int(p.name)
            if ppid == me and pid not in _LIVE and _is_ours(p):
                found = True
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.waitpid(pid, 0)
        if not found:
            return


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    _LIVE.discard(proc.pid)
    _kill_orphans()


def _progress(out: Path) -> str:
    try:
        with open(out / "progress", "rb") as f:
            return f.read(101).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _env(work: Path) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(work), "MHA_GRADING_CHILD": "1"}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    return env


def run_child(root: Path, spec: dict, arrays: dict[str, np.ndarray], limits: Limits,
              deadline: float) -> tuple[str, str | None, int | None]:
    """Run one child on ``spec`` in ``root/{job,work,out}``; returns (last stage, killed, code).

    ``killed`` is ``"timeout"`` when we stopped a stage that ran past ``limits.item_timeout``
    (start-up gets 30 s more) or the overall ``deadline``. The child's whole process group and
    any orphan it left are dead when this returns.
    """
    if resource is None or os.name != "posix":
        raise RuntimeError("isolated grading needs Linux or macOS (resource limits and process "
                           "groups); on Windows use WSL, or check('exNN') inside the notebook")
    job, work, out = root / "job", root / "work", root / "out"
    for d in (job, work, out):
        d.mkdir(parents=True)
    (work / "submission.py").write_text(
        "\n\n".join(c["source"] for nb in spec["notebooks"] for c in nb["cells"]), encoding="utf-8")
    (job / "job.json").write_text(json.dumps(spec), encoding="utf-8")
    with open(job / "inputs.npz", "wb") as f:
        np.savez(f, **arrays)
    _become_subreaper()
    with _LOCK:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "mha_grader.child", str(job), str(out)],
            cwd=work, env=_env(work), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            preexec_fn=_preexec(limits, _user_tasks() + limits.processes, len(spec["notebooks"])))
        _LIVE.add(proc.pid)
    stage, since, killed = "", time.monotonic(), None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            cur = _progress(out)
            if cur != stage:
                stage, since = cur, now
            limit = limits.item_timeout + (30 if stage in ("", "setup") else 0)
            if now - since > limit or now > deadline:
                killed = "timeout"
                break
            time.sleep(0.05)
    finally:
        _kill_group(proc)
    return _progress(out), killed, proc.returncode

"""The end of one child (the parent's side): the sandbox's first process, read from
bubblewrap (``_read_info``), is killed with everything the child started, and the parent waits
until they are gone (``_kill``, ``_gone``); in mode "none" the grader is a subreaper and sweeps
the orphans a child left (``_sweep_orphans``). Afterwards the results folders the harness hid
from later units get their names back (``unseal``). ``launch.py`` calls these.
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
from pathlib import Path


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

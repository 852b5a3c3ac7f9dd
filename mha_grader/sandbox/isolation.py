"""How a child is isolated: ``bwrap`` (bubblewrap namespaces), ``user`` (a dedicated uid), ``none``.

- ``bwrap``: new user, PID, mount, network, IPC, UTS and cgroup namespaces (``--unshare-all``),
  ``--die-with-parent``, ``--new-session``, uid 65534 inside; the file system is a private tmpfs
  plus read-only binds of ONLY the Python runtime, its site-packages (editable-install finders
  hidden), the staged packages and that child's job; its results folder is the one writable bind.
  The parent, other students, the gradebook, ``solutions/``, ``tests/`` and home folders are not
  in it. Killing the namespace's first process kills everything the submission started.
- ``user`` (fallback where bubblewrap cannot make namespaces but the grader is root, e.g. in a
  container): the child runs as a dedicated unprivileged uid (``UID_BASE`` + worker slot, not in
  ``/etc/passwd``), in its own session, writing only where that uid may (its temp folder);
  afterwards every process of that uid is killed with ``kill(-1, SIGKILL)`` from that uid.
- ``none``: a same-user child (self-checks; class grading only with ``--no-isolation``).

``MHA_GRADER_ISOLATION=bwrap|user|none`` forces a mode (tests use it); the default is the
strongest that works here.

Here: which mode (``choose``) and whether the runtime a child needs is there for it. The
bubblewrap command line is ``bwrap.py``; the dedicated uid of mode ``user`` ``dedicated_user.py``.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from mha_grader.errors import IsolationUnavailable
from mha_grader.sandbox.bwrap import (  # noqa: F401 - re-exported: isolation.py's names before its split
    SANDBOX_UID,
    bwrap_argv,
)
from mha_grader.sandbox.dedicated_user import (  # noqa: F401 - re-exported: isolation.py's names before its split
    SHARED_DIRS,
    UID_BASE,
    UIDS,
    UidPool,
    become,
    kill_user,
    remove_files_of,
    remove_ipc,
    remove_leftovers,
)
from mha_grader.sandbox.reach import site_packages  # noqa: F401 (callers read it here too)

ENV_VAR = "MHA_GRADER_ISOLATION"
MODES = ("bwrap", "user", "none")
HOW_TO = (
    "class grading runs each submission in an OS sandbox, and none is available here ({why}). "
    "Get one of: (1) Linux with bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu) or "
    "`sudo dnf install bubblewrap` (Fedora), with unprivileged user namespaces allowed "
    "(`sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 also "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`); (2) run the grader as root in a "
    "Linux container (e.g. `docker run --rm -it -v $PWD:/course python:3.11 bash`): each child "
    "then runs as a dedicated unprivileged user. On macOS or Windows, grade inside such a "
    "container or a Linux VM. To grade anyway WITHOUT isolation (student code can then read and "
    'change anything you can): `--no-isolation`; the gradebook then says "not isolated".'
)


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """``None`` if bubblewrap can make the namespaces here, else why not."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux, this is {sys.platform}"
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (`bwrap`) is not installed"
    try:
        proc = subprocess.run(
            [
                exe,
                "--ro-bind",
                "/",
                "/",
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
                "--uid",
                str(SANDBOX_UID),
                "--gid",
                str(SANDBOX_UID),
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not start: {type(e).__name__}: {e}"
    if proc.returncode != 0:
        return f"bwrap cannot create namespaces: {proc.stderr.strip()[:200]}"
    return None


def user_problem() -> str | None:
    """``None`` if a dedicated unprivileged user can be used (the grader is root on POSIX)."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return "the dedicated-user fallback needs Linux"
    if os.geteuid() != 0:
        return "the dedicated-user fallback needs the grader to run as root"
    return None


def choose(requested: str | None = None, allow_none: bool = False) -> str:
    """The isolation mode to use; ``IsolationUnavailable`` (saying how to get one) if none fits."""
    req = requested or os.environ.get(ENV_VAR) or "auto"
    if req not in (*MODES, "auto"):
        raise ValueError(f"{ENV_VAR}: expected one of bwrap, user, none, auto; got {req!r}")
    if req == "none" or (
        req == "auto" and allow_none and bwrap_problem() and user_runtime_problem()
    ):
        if not allow_none:
            raise IsolationUnavailable(
                "isolation 'none' was asked for, but class grading "
                "needs --no-isolation to run without a sandbox"
            )
        return "none"
    if req in ("bwrap", "auto") and bwrap_problem() is None:
        return "bwrap"
    if req == "bwrap":
        raise IsolationUnavailable(HOW_TO.format(why=bwrap_problem()))
    # Mode "user" only where its uid can read the runtime: else every child would fail to start
    # and the class would get a gradebook of zeros instead of this refusal.
    problem = user_runtime_problem()
    if problem is None:
        return "user"
    if req == "user":
        raise IsolationUnavailable(f"{ENV_VAR}=user, but {problem}")
    raise IsolationUnavailable(HOW_TO.format(why=f"{bwrap_problem()}; {problem}"))


# ------------------------------------------------------------------------- the runtime to expose


def _traversable(path: Path) -> bool:
    """Can a uid that owns nothing read ``path`` (every folder above it o+x, the file o+r)?"""
    path = Path(os.path.realpath(path))
    for parent in path.parents:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def interpreter(mode: str) -> str:
    """The Python binary the child runs (the real one, not the venv's symlink)."""
    exe = os.path.realpath(sys.executable)
    if mode != "user" or _traversable(Path(exe)):
        return exe
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for cand in (f"/usr/bin/{ver}", f"/usr/local/bin/{ver}", f"/opt/python/bin/{ver}"):
        if os.path.exists(cand) and _traversable(Path(cand)):
            return os.path.realpath(cand)
    raise IsolationUnavailable(
        f"the dedicated grading user cannot read the Python runtime {exe} (a folder above it is "
        f"not world-readable) and no world-readable {ver} was found in /usr/bin or /usr/local/bin; "
        "install the course in a world-readable place (e.g. /opt) for the fallback"
    )


def user_runtime_problem() -> str | None:
    """``None`` if mode ``user`` can run here (root on Linux, and the dedicated uid can read the
    Python runtime and site-packages), else the grader's own refusal (e.g. a venv in ``/root``)."""
    if user_problem():
        return user_problem()
    try:
        check_readable_by_user([interpreter("user"), *site_packages()])
    except IsolationUnavailable as e:
        return str(e)
    return None


def check_readable_by_user(paths: list[str]) -> None:
    bad = [p for p in paths if not _traversable(Path(p))]
    if bad:
        raise IsolationUnavailable(
            f"the dedicated grading user cannot read {bad}; install the "
            "course and its packages in a world-readable place (e.g. /opt)"
        )

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
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

from mha_grader.errors import IsolationUnavailable
from mha_grader.sandbox import reach
from mha_grader.sandbox.reach import site_packages  # noqa: F401 (callers read it here too)

ENV_VAR = "MHA_GRADER_ISOLATION"
MODES = ("bwrap", "user", "none")
UID_BASE = int(os.environ.get("MHA_GRADER_UID_BASE", "64000"))
SANDBOX_UID = 65534
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


def _system_binds() -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for p in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return args


def _scratch(binds: dict[str, str] | None, size: int) -> list[str]:
    """``/tmp`` and ``/dev/shm``: the given (sized) folders, else tmpfs of ``size`` bytes."""
    args: list[str] = []
    for target in ("/tmp", "/dev/shm"):
        if binds and target in binds:
            args += ["--bind", binds[target], target]
        else:
            args += [*(["--size", str(size)] if size else []), "--tmpfs", target]
    return args


def bwrap_argv(
    python: str,
    read_only: list[str],
    writable: list[str],
    env: dict[str, str],
    info_fd: int,
    scratch: dict[str, str] | None = None,
    size: int = 0,
) -> list[str]:
    """The bubblewrap command line, up to (not including) the command to run inside. ``scratch``
    / ``size``: what ``/tmp`` and ``/dev/shm`` are (see ``space.py``); ``/`` and ``/dev`` are
    read-only, so nothing else inside is writable."""
    args = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "grading",
        "--clearenv",
        "--info-fd",
        str(info_fd),
        *_system_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *_scratch(scratch, size),
    ]
    runtime = [sys.base_prefix, sys.prefix] if sys.prefix != sys.base_prefix else [sys.prefix]
    seen = set()
    for p in [*runtime, os.path.dirname(os.path.dirname(python)), *read_only]:
        p = os.path.realpath(p)
        if p not in seen and os.path.exists(p) and not p.startswith("/usr/"):
            seen.add(p)
            args += ["--ro-bind", p, p]
    for sp in site_packages():  # hide editable-install finders: they point into the repository
        for f in Path(sp).glob("__editable__*"):
            args += ["--ro-bind", "/dev/null", str(f)]
    args += reach.bwrap_args(["/usr", *seen])  # the installed course: an empty folder here
    for p in writable:
        args += ["--bind", p, p]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return [*args, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"]


# ------------------------------------------------------------------------- the dedicated user


class UidPool:
    """One dedicated uid per running child, exclusive across threads AND processes (a lock file
    per uid in a root-only folder), so killing 'every process of uid X' hits only that child."""

    def __init__(self, base: int = UID_BASE, size: int = 64) -> None:
        self._uids = list(range(base, base + size))
        self._lock = threading.Lock()
        self._dir = Path(os.environ.get("MHA_GRADER_LOCKS", "/tmp/mha-grader-uid-locks"))

    def _take(self) -> tuple[int, int] | None:
        import fcntl

        self._dir.mkdir(mode=0o700, exist_ok=True)
        for uid in self._uids:
            fd = os.open(self._dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return uid, fd
            except OSError:
                os.close(fd)
        return None

    @contextlib.contextmanager
    def lease(self):
        import time

        while True:
            with self._lock:
                got = self._take()
            if got:
                break
            time.sleep(0.1)
        uid, fd = got
        try:
            kill_user(uid)
            remove_leftovers(uid)
            yield uid
        finally:
            kill_user(uid)
            remove_leftovers(uid)  # nothing a child left on the host reaches the next one
            os.close(fd)  # releases the flock


UIDS = UidPool()


def _uid_running(uid: int) -> bool:
    """Does any live (not zombie) process have ``uid`` as its real, effective or saved uid?"""
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            fields = dict(
                line.split(":", 1)
                for line in (p / "status").read_text().splitlines()
                if ":" in line
            )
            if str(uid) in fields.get("Uid", "").split()[:3] and not fields.get(
                "State", ""
            ).strip().startswith(("Z", "X")):
                return True
    return False


def kill_user(uid: int) -> None:
    """Kill every process of ``uid``: a helper becomes ``uid`` and calls ``kill(-1, SIGKILL)``,
    which the kernel applies to all of that uid's processes at once (no fork race)."""
    for _ in range(20):
        if not _uid_running(uid):
            return
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the helper
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    raise RuntimeError(f"processes of the grading uid {uid} would not die")


SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def remove_files_of(uid: int, roots: tuple[str, ...] = SHARED_DIRS) -> None:
    """Delete every file or folder ``uid`` owns in the host's world-writable folders (``roots``
    and the world-writable folders under them, the only places a uid in no group can create
    anything). Run after every process of ``uid`` is dead, so nothing races it."""

    def sweep(folder: str, depth: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid:
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and depth < 8:
                sweep(e.path, depth + 1)

    for root in roots:
        sweep(root, 0)


def remove_leftovers(uid: int) -> None:
    """What a dead child of ``uid`` may have left for the next one on the host (mode "user")."""
    remove_files_of(uid)
    remove_ipc(uid)


def remove_ipc(uid: int) -> None:
    """Remove every SysV shared memory segment, semaphore set and message queue that ``uid``
    created or owns (mode "user" shares the host's IPC namespace; POSIX message queues cannot be
    listed without an mqueue mount and are not removed: see the guide)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    rm = {
        "shm": lambda i: libc.shmctl(i, 0, None),
        "sem": lambda i: libc.semctl(i, 0, 0),
        "msg": lambda i: libc.msgctl(i, 0, None),
    }  # IPC_RMID = 0
    for kind, remove in rm.items():
        try:
            rows = Path(f"/proc/sysvipc/{kind}").read_text().split("\n")
        except OSError:
            continue
        head = rows[0].split()
        for row in rows[1:]:
            f = dict(zip(head, row.split()))
            if str(uid) in (f.get("uid"), f.get("cuid")):
                remove(int(f[head[1]]))  # the second column is the object's id


def become(uid: int) -> None:
    """In a preexec: drop to ``uid`` (no supplementary groups) for good."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)

"""The dedicated uid of mode ``user`` (see ``isolation.py``): the fallback where bubblewrap
cannot make namespaces but the grader is root.

Each running child leases its own unprivileged uid (``UIDS``: exclusive across threads and
processes); before and after a child, every process of that uid is killed at once
(``kill_user``) and what it left on the host is removed (``remove_leftovers``: files in the
world-writable folders, SysV IPC objects). ``become`` drops to the uid in the child's preexec.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import threading
from pathlib import Path

UID_BASE = int(os.environ.get("MHA_GRADER_UID_BASE", "64000"))


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

"""The writable space of a child, sized: what a submission can fill is a budget, not the host.

Every place a child may write is a tmpfs with ``size=`` and ``nr_inodes=`` (``Limits.disk_mb``,
``Limits.disk_files``), so filling it costs the host at most that, and running out is
``ENOSPC`` inside the sandbox, which the parent sees (``full``) and reports per student:

- where the grader may mount (root on Linux: containers, Gradescope, CI), a run's results
  folder ``out/`` is a tmpfs of ``Limits.result_mb`` and its ``scratch/`` (``home/``, ``shm/``)
  one of ``Limits.disk_mb`` (``mount_run``: separate, so filling the temp space cannot stop the
  results), unmounted after the results are read (``release``). Under bubblewrap, ``home/`` and ``shm/`` are the
  sandbox's ``/tmp`` and ``/dev/shm`` and its own root and ``/dev`` are read-only; in mode
  ``user`` the child also gets a private mount namespace in which ``/var/tmp``, ``/dev/shm``
  and ``/run/lock`` are sized tmpfs (``private_scratch``, in its preexec); the host's ``/tmp``
  stays (it holds the run's folders): there only Landlock (units confined) keeps learner code
  out of it, so with ``MHA_GRADER_UNITS=sandbox`` in mode ``user`` it is not sized.
- unprivileged bubblewrap: ``/tmp`` and ``/dev/shm`` are ``--size``-d tmpfs (bubblewrap cannot
  set ``nr_inodes``); the results folder is host disk, bounded per file by RLIMIT_FSIZE only
  (see the guide's Security section).

``sweep_stale`` removes what a grader that died (SIGKILL, OOM) left in the temp folder. A grader
tells it "alive" by the folder's ``LOCK`` file, which it holds ``flock``-ed as long as the folder
lives (``hold``/``held``); the kernel drops the lock when the grader dies, however it dies. Not by
its pid: two graders that share ``/tmp`` across PID namespaces (two containers) see different pid
numbers, and a pid in a folder's name may be dead here while its grader is alive there.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
_MNT_DETACH = 2
_CLONE_NEWNS = 0x00020000
SCRATCH = ("/var/tmp", "/dev/shm", "/run/lock")  # not /tmp: it holds the run and stage folders
FULL_SLACK = 256 * 1024  # bytes free at most (or 8 inodes) to call a space full
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def can_mount() -> bool:
    """May this grader mount a sized tmpfs (root on Linux)?"""
    return _LIBC is not None and os.geteuid() == 0


def _mount_tmpfs(path: str, size: int, inodes: int, mode: str) -> None:
    opts = f"size={int(size)},nr_inodes={int(inodes)},mode={mode}".encode()
    if _LIBC.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")


def mount_run(root: Path, out: Path, scratch: Path, limits) -> bool:
    """Make ``out`` (results) a tmpfs of ``limits.result_mb`` MiB and ``scratch`` (the child's
    temp and shared memory) one of ``limits.disk_mb`` MiB, each of ``limits.disk_files`` files;
    False if this grader cannot mount (then the caller falls back, see the module's docstring)."""
    if not can_mount():
        return False
    _mount_tmpfs(str(out), limits.result_mb * 2**20, limits.disk_files, "0700")
    _mount_tmpfs(str(scratch), limits.disk_mb * 2**20, limits.disk_files, "0755")
    return True


def release(root: Path) -> None:
    """Unmount a run's tmpfs (lazily: nothing can hold them, its sandbox is gone)."""
    for m in _mounts_under(str(root)):
        _LIBC.umount2(os.fsencode(m), _MNT_DETACH)


def full(root: Path) -> bool:
    """Is the file system holding ``root`` (nearly) out of bytes or inodes?"""
    try:
        st = os.statvfs(root)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize <= FULL_SLACK or (st.f_files and st.f_favail <= 8)


def private_scratch(size: int, inodes: int) -> None:
    """In a preexec (as root, before dropping to the grading uid): a private mount namespace whose
    shared scratch folders are sized tmpfs, so the child cannot fill the host's."""
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if _LIBC.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    for d in SCRATCH:
        if os.path.isdir(d) and not os.path.islink(d):
            _mount_tmpfs(d, size, inodes, "1777")


def run_prefix() -> str:
    """The prefix of this grader's run folders, ``mha-grade-<pid>-`` (the pid only says who made
    it, for a person looking at ``/tmp``: ``sweep_stale`` goes by the folder's lock)."""
    return f"mha-grade-{os.getpid()}-"


LOCK = ".alive.lock"  # in each grader folder: flock-ed by the grader that made it, while it lives
UNLOCKED_GRACE = 600.0  # seconds: a folder without a LOCK file younger than this is left alone
_HELD: dict[str, int] = {}  # folder -> the descriptor holding its lock (process-lifetime folders)


def lock(folder: str | os.PathLike) -> int:
    """Create ``folder/LOCK`` and hold an exclusive ``flock`` on it; returns the descriptor (the
    lock lasts until it is closed, or this process dies). Not inherited by children (O_CLOEXEC)."""
    fd = os.open(
        os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def hold(folder: str | os.PathLike) -> None:
    """Hold ``folder``'s lock for the rest of this process (the stage and master folders)."""
    _HELD[str(folder)] = lock(folder)


@contextlib.contextmanager
def held(folder: str | os.PathLike):
    """Hold ``folder``'s lock while the block runs (a run folder, removed at its end)."""
    fd = lock(folder)
    try:
        yield folder
    finally:
        os.close(fd)


def _dead(folder: str) -> bool:
    """Is the grader that made ``folder`` gone? Its lock is free (we can take it), or it never
    made one and the folder is older than ``UNLOCKED_GRACE`` (a grader killed between
    ``mkdtemp`` and ``lock``, or one from before the locks)."""
    try:
        fd = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return time.time() - os.lstat(folder).st_mtime > UNLOCKED_GRACE
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its grader lives (in this PID namespace or another)
    finally:
        os.close(fd)
    return True


def sweep_stale(
    tmp: str | None = None, prefixes: tuple[str, ...] = ("mha-grade-", "mha-stage-", "mha-master-")
) -> list[str]:
    """Remove ``<tmp>/<prefix>*`` folders whose grader is dead (a crash, an OOM kill: its
    ``LOCK`` is free, see ``_dead``): unmount any tmpfs under them, then delete. Returns what
    was removed."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError):
        for e in os.scandir(tmp):
            if not any(e.name.startswith(p) for p in prefixes) or not e.is_dir(
                follow_symlinks=False
            ):
                continue
            if not _dead(e.path):
                continue
            for m in _mounts_under(e.path):
                _LIBC.umount2(os.fsencode(m), _MNT_DETACH)
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(e.path)
    return removed


def _mounts_under(path: str) -> list[str]:
    if _LIBC is None:
        return []
    try:
        rows = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [r.split()[1].encode().decode("unicode_escape") for r in rows if len(r.split()) > 1]
    return sorted((p for p in points if p == path or p.startswith(path + "/")), reverse=True)

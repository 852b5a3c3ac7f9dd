"""Confine one unit inside the sandbox, so the units of one student cannot help each other.

A sandbox runs all of a student's units (see ``child.py``); each unit is a process forked by the
zygote with its OWN staged course, in which that unit's forbidden functions are absent. Without
this module a unit could import another unit's staged course (they are all mounted), leave a
function's source for a later unit in a shared folder, or leave a process behind to serve it.
Before any learner code, each unit (``confine_unit``, in the forked child):

1. gets new user and IPC namespaces of its own (nested in the sandbox's), so SysV/POSIX IPC
   objects are private to it, and drops the capabilities that the new user namespace gave it
   (no network namespace: one added 17 ms per unit here, median of 25 forks at load 11, and
   Landlock already scopes abstract unix sockets and TCP);
2. is restricted by **Landlock** (the kernel's unprivileged access control, Linux >= 5.13): it may
   read only the Python runtime, site-packages, the engine and ITS OWN staged course (plus
   ``/usr``, ``/lib*``, ``ld.so.cache``, its own ``/proc/<pid>``, ``/dev/null|zero|urandom``),
   write only its own results and temp folders, make no TCP connection, signal no process and
   reach no abstract unix socket outside its own domain. Landlock also forbids ptrace (and so
   ``/proc/<pid>/mem``) of any process outside the domain, i.e. the zygote.

Between units the zygote kills every other process it can signal (``kill_others``) and removes
the unit's temp folder. Where Landlock or the nested namespaces are unavailable (``problem()``),
or ``MHA_GRADER_UNITS=sandbox``, the runner instead runs one sandbox per unit.

Landlock through ``landlockpy`` (dependency-free, ABI 1-11, best effort on older kernels); the
namespaces and capabilities are three plain syscalls through ``ctypes`` (no binding needed).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import struct
import sys
import time
from collections.abc import Sequence

ENV_VAR = "MHA_GRADER_UNITS"
UNIT_MODES = ("landlock", "sandbox")
_CLONE_NEWUSER, _CLONE_NEWIPC = 0x10000000, 0x08000000
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_READ_FILES = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
)
_READ_TREES = ("/usr", "/lib", "/lib64", "/lib32")


class ConfineFailed(RuntimeError):
    """The unit could not be confined: it must not run learner code."""


# --------------------------------------------------------------------------- parent side


@functools.lru_cache(maxsize=1)
def problem() -> str | None:
    """``None`` if units can be confined here (Landlock with scopes + nested namespaces), else why."""
    if not sys.platform.startswith("linux"):
        return f"Landlock needs Linux, this is {sys.platform}"
    try:
        import landlockpy
    except ImportError:
        return "the Python package landlockpy is not installed"
    abi = landlockpy.abi_version()
    if abi < 6:  # 6: signals and abstract unix sockets scoped to the domain
        return f"the kernel's Landlock ABI is {abi} (need 6: Linux 6.12 or newer)"
    return _probe_namespaces()


def _probe_namespaces() -> str | None:
    """Can an unprivileged process (uid 65534 when we are root) make the unit's namespaces?"""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the probe
        code = 1
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            _unshare()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "an unprivileged process cannot create user namespaces here"
    return None


def unit_mode(isolation_mode: str) -> str:
    """``"landlock"`` (one sandbox per student, each unit confined in it), ``"sandbox"`` (one
    sandbox per unit) or ``"shared"`` (isolation "none": nothing is isolated anyway)."""
    if isolation_mode == "none":
        return "shared"
    want = os.environ.get(ENV_VAR) or "auto"
    if want not in (*UNIT_MODES, "auto"):
        raise ValueError(f"{ENV_VAR}: expected landlock, sandbox or auto; got {want!r}")
    if want == "sandbox" or problem() is not None:
        if want == "landlock":
            from mha_grader.errors import IsolationUnavailable

            raise IsolationUnavailable(f"{ENV_VAR}=landlock, but {problem()}")
        return "sandbox"
    return "landlock"


# --------------------------------------------------------------------------- child side


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unshare() -> None:
    """New user and IPC namespaces; map our uid/gid to themselves in the new one."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: after a setuid, /proc/self is root's otherwise
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWIPC) != 0:
        raise ConfineFailed(f"unshare: {os.strerror(ctypes.get_errno())}")
    for name, text in (
        ("setgroups", b"deny"),
        ("uid_map", b"%d %d 1" % (uid, uid)),
        ("gid_map", b"%d %d 1" % (gid, gid)),
    ):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)  # bytes only: no codec lookup after fork
        try:
            os.write(fd, text)
        finally:
            os.close(fd)


def _drop_capabilities() -> None:
    """No capabilities at all (the new user namespace gave us every one of them in it)."""
    nr = _SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise ConfineFailed(f"capset: unknown machine {os.uname().machine}")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2): all zero
    if _libc().syscall(nr, header, data) != 0:
        raise ConfineFailed(f"capset: {os.strerror(ctypes.get_errno())}")


def _landlock(read: list[str], write: list[str], execute: Sequence[str] = ()) -> None:
    import landlockpy as L

    read_file = L.AccessFS.READ_FILE
    read_tree = read_file | L.AccessFS.READ_DIR
    everything = L.fs_for_abi(L.abi_version()) & ~L.AccessFS.EXECUTE
    ruleset = L.Ruleset(scoped=L.Scope.ABSTRACT_UNIX_SOCKET | L.Scope.SIGNAL)
    try:
        for p in dict.fromkeys(read):
            if os.path.isdir(p):
                ruleset.allow_path(p, read_tree)
            elif os.path.exists(p):  # a file or a device (_READ_FILES: isfile() is False for those)
                ruleset.allow_path(p, read_file)
        for p in ("/dev/null",):
            ruleset.allow_path(p, L.AccessFS.READ_FILE | L.AccessFS.WRITE_FILE)
        for p in write:
            ruleset.allow_path(p, everything)
        for p in dict.fromkeys(execute):  # files only (never a folder): each one named
            if os.path.isfile(p):
                ruleset.allow_path(p, read_file | L.AccessFS.EXECUTE)
        ruleset.restrict()  # also sets no_new_privs
    finally:
        ruleset.close()


def warm_up(read: list[str], write: list[str]) -> None:
    """The zygote, once: build (and drop) a ruleset, so that each forked unit finds landlockpy
    imported and its flag values made (the first ruleset costs ~10x the next, ~1 ms)."""
    import landlockpy as L

    ruleset = L.Ruleset(scoped=L.Scope.ABSTRACT_UNIX_SOCKET | L.Scope.SIGNAL)
    try:
        for p in dict.fromkeys([*read, *_READ_TREES]):
            if os.path.isdir(p):
                ruleset.allow_path(p, L.AccessFS.READ_FILE | L.AccessFS.READ_DIR)
        for p in write:
            ruleset.allow_path(p, L.fs_for_abi(L.abi_version()) & ~L.AccessFS.EXECUTE)
    finally:
        ruleset.close()


def interpreter_files() -> list[str]:
    """This Python's executable and its ELF interpreter (``PT_INTERP``, which ``execve`` opens
    for execution too): what a unit needs to start this Python again, and nothing else."""
    exe = os.path.realpath(sys.executable)
    out = [exe]
    try:
        with open(exe, "rb") as f:
            head = f.read(64)
            if head[:5] != b"\x7fELF\x02":  # 64-bit ELF only; otherwise the executable alone
                return out
            (phoff,) = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            for k in range(phnum):
                f.seek(phoff + k * phentsize)
                p_type, _, p_offset, _, _, p_filesz = struct.unpack("<IIQQQQ", f.read(40))
                if p_type == 3:  # PT_INTERP
                    f.seek(p_offset)
                    out.append(os.path.realpath(f.read(p_filesz).rstrip(b"\0").decode()))
    except (OSError, struct.error, UnicodeDecodeError):
        pass
    return out


def confine_unit(read: list[str], write: list[str], execute: Sequence[str] = ()) -> None:
    """Confine this (forked, single-threaded) unit; ``ConfineFailed`` if any step fails.
    ``execute``: the only files it may execute (none unless given: see ``interpreter_files``)."""
    try:
        _unshare()
        _drop_capabilities()
        here = os.path.realpath(f"/proc/{os.getpid()}")
        _landlock([*read, *_READ_TREES, *_READ_FILES, here], write, execute)
    except ConfineFailed:
        raise
    except Exception as e:  # noqa: BLE001 - any failure means: not confined
        raise ConfineFailed(f"{type(e).__name__}: {e}") from None


def _others_alive(me: int) -> bool:
    """Does a live process other than init and ``me`` run as our uid?"""
    uid = b"%d" % os.getuid()
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in (1, me):
            continue
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{p}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f if b":" in line)
            if fields.get(b"Uid", b"").split()[:1] == [uid] and fields.get(b"State", b"").split()[
                :1
            ] not in ([b"Z"], [b"X"]):
                return True
    return False


def kill_others(timeout: float = 10.0) -> None:
    """The zygote, between units: kill every process it may signal but itself (the sandbox's PID
    namespace, or every process of the dedicated uid) and reap them; ``ConfineFailed`` if some
    survive. ``kill(-1)`` reaches them all at once, so no fork can race it."""
    me, end = os.getpid(), time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if not _others_alive(me):
            return
        time.sleep(0.002)
    raise ConfineFailed("processes of a unit would not die")


def become_subreaper() -> None:
    """The zygote: orphans of a unit come back to it (to be killed and reaped)."""
    _libc().prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

"""No network for learner code, in every isolation mode.

``bwrap`` gives the child its own network namespace (``--unshare-all``): the host's loopback and
abstract unix sockets are not in it. Mode ``user`` shares the host's network, and Landlock (where
units are confined) scopes only TCP and abstract unix sockets: UDP and pathname unix sockets
would still reach services on the host. So, in both modes:

- the parent makes the child a network namespace of its own where it may (``new_namespace``:
  root with ``CAP_SYS_ADMIN``; in a container usually not);
- the child, before anything else, installs a **seccomp** filter (``forbid_sockets``): the
  ``socket`` call fails with ``EACCES`` for every family (IPv4, IPv6, unix, netlink, packet...),
  ``io_uring_setup`` (which can make sockets without that call) with ``ENOSYS``, and every
  syscall of another ABI (i386, x32) with ``EACCES``. ``socketpair`` stays (it reaches no one),
  and the evidence channel is a socket the parent made and passed in.

Plain ``prctl``/``seccomp`` through ``ctypes``: no binding needed. Forked units inherit it.
"""

from __future__ import annotations

import ctypes
import errno
import os

_ARCH = {  # machine -> (AUDIT_ARCH_*, socket, io_uring_setup, first syscall of another ABI)
    "x86_64": (0xC000003E, 41, 425, 0x40000000),
    "aarch64": (0xC00000B7, 198, 425, None),
}
_LD_ABS_W, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_CLONE_NEWNET = 0x40000000


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def _program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter: (code, jump if true, jump if false, k) per instruction."""
    arch, sock, uring, other_abi = _ARCH[machine]
    deny = _ERRNO | errno.EACCES
    prog = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, deny),  # another ABI's syscall (int 0x80...)
        (_LD_ABS_W, 0, 0, 0),
    ]  # seccomp_data.nr
    if other_abi is not None:
        prog += [(_JGE, 0, 1, other_abi), (_RET, 0, 0, deny)]  # x32
    prog += [
        (_JEQ, 0, 1, sock),
        (_RET, 0, 0, deny),
        (_JEQ, 0, 1, uring),
        (_RET, 0, 0, _ERRNO | errno.ENOSYS),
        (_RET, 0, 0, _ALLOW),
    ]
    return prog


def problem() -> str | None:
    """``None`` if the filter can be installed on this machine."""
    if not os.uname().sysname == "Linux":
        return "seccomp needs Linux"
    if os.uname().machine not in _ARCH:
        return f"no socket filter for the machine {os.uname().machine}"
    return None


def forbid_sockets() -> None:
    """Install the filter on this (single-threaded) process and its future children; raises
    ``OSError`` if the kernel refuses it (the caller must then run no learner code)."""
    if problem():
        raise OSError(problem())
    insns = _program(os.uname().machine)
    arr = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), ctypes.cast(arr, ctypes.POINTER(_Insn)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def new_namespace() -> bool:
    """In a preexec, as root: a network namespace of its own (only a down loopback). False
    where the kernel refuses (no ``CAP_SYS_ADMIN``): the seccomp filter still holds."""
    try:
        return ctypes.CDLL(None, use_errno=True).unshare(_CLONE_NEWNET) == 0
    except OSError:
        return False

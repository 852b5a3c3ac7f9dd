"""The bubblewrap command line of one child (mode ``bwrap``, see ``isolation.py``).

``bwrap_argv``: new namespaces of every kind, uid 65534 inside, a clean environment, and a file
system of read-only binds of ONLY the system's libraries, the Python runtime, its site-packages
(editable-install finders hidden), the staged packages and the child's job, with the installed
course an empty folder (``reach.py``); ``/tmp`` and ``/dev/shm`` are sized (``space.py``) and the
results folder is the one writable bind.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mha_grader.sandbox import reach
from mha_grader.sandbox.reach import site_packages

SANDBOX_UID = 65534


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

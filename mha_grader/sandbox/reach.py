"""Keep the INSTALLED course out of every sandbox's reach (the child imports only a staged copy).

The sandbox must mount site-packages (numpy, torch...). After a normal (wheel) install - what
``classroom/gradescope/setup.sh`` does - the real ``mha_course``, every forbidden function in
it, lies in that same folder; after an editable install it lies in a checkout, next to
``solutions/``. ``hidden()`` names those folders, and each isolation mode hides them:

- ``bwrap``: an empty read-only tmpfs is mounted over each of them that lies inside a mounted
  tree (``bwrap_args``); the rest of the host is not mounted at all.
- ``user``: the child, before it imports anything, restricts its own READS with Landlock
  (``restrict_reads``, any Landlock ABI): it may read only the runtime, site-packages, the
  engine, its job and staged courses, its own folders, ``/usr``, ``/lib*``, ``/bin``, ``/etc``,
  ``/proc``, ``/sys`` and ``/dev`` (``user_roots``), and none of the hidden folders inside them;
  a folder that holds a hidden one (site-packages after a wheel install) may still be listed
  (``listable``), so every other package in it imports.
  Where Landlock is missing, the parent refuses mode ``user`` unless the dedicated uid cannot
  read the hidden folders anyway (``user_problem``).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

from mha_grader.stage import COURSE, ENGINE, package_dir

_SYSTEM_ROOTS = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
)


def site_packages() -> list[str]:
    """Site-packages folders the child imports from (numpy, torch...), no .pth processing."""
    out = []
    for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]:
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return out


def hidden() -> list[str]:
    """The installed course and engine packages (real paths) and, if the course is a source
    checkout (an editable install: ``pyproject.toml`` beside it), the checkout itself."""
    out = []
    for name in (COURSE, ENGINE):
        pkg = Path(os.path.realpath(package_dir(name)))
        out.append(str(pkg))
        if (pkg.parent / "pyproject.toml").is_file():
            out.append(str(pkg.parent))
    return sorted(set(out))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bwrap_args(bound: list[str]) -> list[str]:
    """bubblewrap arguments that put an empty read-only tmpfs over every hidden folder that lies
    strictly inside one of the ``bound`` trees (and holds none of them: e.g. a checkout holding
    the venv stays, its ``solutions/`` is not mounted anyway)."""
    bound = [os.path.realpath(b) for b in bound]
    args: list[str] = []
    for h in hidden():
        if any(_inside(h, b) and h != b for b in bound) and not any(_inside(b, h) for b in bound):
            args += ["--tmpfs", h, "--remount-ro", h]
    return args


def user_roots(python: str, folders: list[str]) -> list[str]:
    """What a child in mode ``user`` may read: the system, the runtime, and ``folders``."""
    runtime = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(python))}
    return sorted({*_SYSTEM_ROOTS, *runtime, *site_packages(), *folders})


def allowed(roots: list[str], hide: list[str]) -> list[str]:
    """``roots`` with every folder of ``hide`` cut out: a root holding a hidden folder is
    replaced by its entries (recursively), so Landlock's allow-list of trees can express it."""
    return _cut(roots, hide)[0]


def listable(roots: list[str], hide: list[str]) -> list[str]:
    """The folders ``allowed`` replaced by their entries (site-packages holding the installed
    course, a checkout holding the venv): they may still be LISTED, or Python's import system,
    which lists a folder to find a module in it, finds nothing there that was not imported before
    the child was confined (Triton, a learner's ``import networkx``). Landlock grants listing to
    the whole tree below, so a hidden folder's NAMES can be listed too; its files cannot be read."""
    return _cut(roots, hide)[1]


def _cut(roots: list[str], hide: list[str]) -> tuple[list[str], list[str]]:
    hide = _around(roots, [os.path.realpath(h) for h in hide])
    out: list[str] = []
    between: list[str] = []

    def walk(p: str, depth: int) -> None:
        if not os.path.exists(p) or any(_inside(p, h) for h in hide):
            return
        if not any(_inside(h, p) for h in hide):
            out.append(p)
        elif depth < 32 and os.path.isdir(p):
            between.append(p)
            for name in sorted(os.listdir(p)):
                walk(os.path.realpath(os.path.join(p, name)), depth + 1)

    for r in roots:
        walk(os.path.realpath(r), 0)
    return sorted(set(out)), sorted(set(between))


def _around(roots: list[str], hide: list[str]) -> list[str]:
    """``hide`` with every folder that HOLDS a root (a checkout holding its ``.venv``, as
    ``make`` lays it out) replaced by its entries that lead to no root: the root stays readable,
    everything else in that folder (``mha_course/``, ``solutions/``, ``tests/``...) stays hidden."""
    roots = [os.path.realpath(r) for r in roots]
    out: list[str] = []
    for h in hide:
        inner = [r for r in roots if _inside(r, h) and r != h]
        todo = [h] if inner else []
        if not inner:
            out.append(h)
        while todo:
            folder = todo.pop()
            for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
                entry = os.path.join(folder, name)
                if not any(_inside(r, entry) for r in inner):
                    out.append(entry)  # leads to no root: hidden
                elif entry not in inner:
                    todo.append(entry)  # on the way to a root: look inside
    return sorted(set(out))


def landlock_problem() -> str | None:
    """``None`` if this kernel and Python can restrict a process's reads with Landlock."""
    try:
        import landlockpy
    except ImportError:
        return "the Python package landlockpy is not installed"
    if landlockpy.abi_version() < 1:
        return "this kernel has no Landlock (Linux 5.13 or newer, enabled in the LSM list)"
    return None


def user_problem(readable) -> str | None:
    """Mode ``user`` without Landlock: ``None`` if the dedicated uid cannot read any hidden
    folder (``readable(path)`` says whether it can), else what to do."""
    if landlock_problem() is None:
        return None
    bad = [h for h in hidden() if readable(Path(h))]
    if not bad:
        return None
    return (
        f"the dedicated grading user could read the installed course ({', '.join(bad)}) and "
        f"{landlock_problem()}; make it unreadable to others (`chmod -R o-rwx` on those "
        "folders) or use a kernel with Landlock"
    )


def restrict_reads(roots: list[str], hide: list[str]) -> None:
    """The child, first thing (single-threaded): read only ``roots`` minus ``hide``, for good.
    Only reading is restricted here (writing is the uid's business)."""
    import landlockpy as L

    read = L.AccessFS.READ_FILE | L.AccessFS.READ_DIR
    ruleset = L.Ruleset(handled_fs=read, handled_net=L.AccessNet.NONE)
    trees, folders = _cut(roots, hide)
    try:
        for p in trees:
            ruleset.allow_path(p, read if os.path.isdir(p) else L.AccessFS.READ_FILE)
        for p in folders:  # list, never read: the hidden entries stay unreadable
            ruleset.allow_path(p, L.AccessFS.READ_DIR)
        ruleset.restrict()
    finally:
        ruleset.close()

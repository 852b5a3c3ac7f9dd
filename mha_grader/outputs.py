"""Writing the gradebook safely: a fresh folder, no-follow exclusive writes, inert CSV cells.

The class layout is checked before anything is graded: student folders and notebooks must be
real folders and files (no symlinks, no hard links), and student names must be plain (no path
separators, no control or invisible characters, not a name the gradebook itself uses), and no two
names may look the same in the gradebook (``identity``: Unicode NFKC, spaces collapsed, the
spreadsheet-formula escaping applied): such names are all refused.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

RESERVED = frozenset({"grades.csv", "grading.json", "rejected.txt"})
_NAME = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,120}$")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
# control, format (zero-width, bidi controls), private-use, surrogate, unassigned, line/paragraph
_INVISIBLE = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})


def check_student_name(name: str) -> str | None:
    """Why ``name`` cannot be a student folder (``None`` if it can)."""
    if name in (".", "..") or name.startswith(".") or not _NAME.match(name):
        return "the folder name is not a plain name (dots, separators or control characters)"
    if any(unicodedata.category(c) in _INVISIBLE for c in name):
        return "the folder name holds invisible or control characters (zero-width, bidi, format)"
    if name.lower() in RESERVED:
        return f"the folder name {name!r} is reserved for the gradebook's own files"
    return None


def identity(name: str) -> str:
    """How ``name`` reads in the gradebook: NFKC (full-width letters, ligatures, no-break
    spaces folded), white space collapsed, then the CSV cell it becomes (``csv_cell``)."""
    return csv_cell(" ".join(unicodedata.normalize("NFKC", name).split()))


def collisions(names: list[str]) -> dict[str, str]:
    """``{name: why}`` for every name whose ``identity`` another name shares (all are refused:
    no one could tell their rows apart)."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(identity(n), []).append(n)
    return {
        n: "the folder name reads the same in the gradebook as "
        + ", ".join(repr(o) for o in group if o != n)
        + " (after Unicode NFKC and formula escaping)"
        for group in groups.values()
        if len(group) > 1
        for n in group
    }


def check_student_folder(path: Path) -> str | None:
    """Why this student folder is refused (``None`` if it is a real folder)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot read the folder ({type(e).__name__})"
    if stat.S_ISLNK(st.st_mode):
        return "the student folder is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    return None


def check_notebook(path: Path) -> str | None:
    """Why this notebook is refused: a link, a hard link, not a regular file (``None`` if fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot read {path.name} ({type(e).__name__})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path.name} is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file"
    if st.st_nlink > 1:
        return f"{path.name} is a hard link (it has {st.st_nlink} names)"
    return None


def fresh_folder(out: Path) -> None:
    """Create ``out`` (it may exist only as an EMPTY real folder)."""
    if os.path.lexists(out):
        if os.path.islink(out) or not out.is_dir():
            raise ValueError(f"--out: {out} exists and is not a folder; give a new folder")
        if any(out.iterdir()):
            raise ValueError(
                f"--out: {out} is not empty; give a new folder (nothing is overwritten)"
            )
    else:
        out.mkdir(parents=True)


def mkdir_new(path: Path) -> None:
    """A new folder, never through a link (``FileExistsError`` if anything is there)."""
    os.mkdir(path, 0o755)


def write_new(path: Path, text: str) -> None:
    """Write a NEW file: never follows a link, never truncates an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def csv_cell(value: object) -> str:
    """A cell a spreadsheet shows as text: a leading ``= + - @``, tab or CR gets a ``'``."""
    s = str(value)
    return "'" + s if s.startswith(_FORMULA) else s

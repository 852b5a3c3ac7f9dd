"""Find each exercise notebook in a student's folder, by its content and its name, wherever it lies.

One collector for every path (``mha-course grade``, Gradescope's autograder). A student's folder
may hold ``Downloads/ex02_scaled_dot_product_attention (1).ipynb`` (a browser's second download),
``Copy of ex01_....ipynb``, a notebook renamed ``homework.ipynb``, checkpoints, notes. Each
``.ipynb`` file is identified:

- by its **content**: the nbgrader ``grade_id`` s in its cells' metadata (``"grade_id":
  "ex02_attention"``; every exercise notebook carries them) name the exercise most of them
  belong to. The bytes are searched with one linear regular expression, never parsed here (the
  grading process does not parse untrusted notebooks, see ``scan.py``), at most ``MAX_BYTES``;
- else by its **name**: ``exNN`` in the file name (not inside a word: ``alex02`` is not ex02).

Content wins over the name (a note says so when they disagree). Links, hard links and other
non-regular files are never read: they are identified by name only and refused when chosen, as
before (status ``rejected``).

**Competing candidates** for one exercise are decided by a stated rule, never by a file's
modification time (which a copy, an unzip or a sync sets):

1. the file at the documented place, ``<student>/exNN_<topic>.ipynb``;
2. else the candidate with the fewest untouched task stubs (``raise NotImplementedError``), i.e.
   the one with the most work in it;
3. else the one nearest the top of the folder, then the first by path.

Candidates with identical bytes do not compete. When different candidates competed, the
exercise's collection status is ``competing`` and the note names the rule that decided it.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 64 * 2**20  # read at most this much of one file to identify it
MAX_NOTEBOOKS = 200  # notebooks identified per student folder; the rest are ignored, and said so
_EXERCISE = re.compile(r"(?<![A-Za-z0-9])ex(\d{2})(?!\d)", re.IGNORECASE)
_GRADE_ID = re.compile(rb'"grade_id"\s*:\s*"(ex\d{2})_')
_STUB = re.compile(rb"raise NotImplementedError")
SKIP_DIRS = frozenset({".ipynb_checkpoints", "__MACOSX", ".git", "__pycache__"})

# Collection statuses, one per (student, exercise), in OUT/collection.csv.
TAKEN = "taken"  # at the documented place
FOUND = "found"  # elsewhere (renamed, nested) and the only candidate
COMPETING = "competing"  # several different candidates; the rule above picked one
MISSING = "missing"  # no candidate


@dataclass
class Collected:
    """What one student's folder gave: ``taken`` (exercise stem -> path), per exercise its
    ``status`` and ``source`` (path relative to the folder), ``ignored`` (relative path -> why) and
    ``notes`` (one sentence each, for the student's feedback and the instructor)."""

    taken: dict[str, Path] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    rule: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Candidate:
    path: Path
    rel: str
    regular: bool
    by_name: str | None
    by_content: str | None
    stubs: int
    digest: bytes


def _read(path: Path) -> bytes | None:
    """At most ``MAX_BYTES`` of a regular file, without following a link; None if not readable."""
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_BYTES)
    finally:
        if fd >= 0:
            os.close(fd)


def content_exercise(data: bytes, known: set[str]) -> str | None:
    """The exercise (``"ex02"``) most of the notebook's graded cells belong to (ties: None)."""
    counts: dict[str, int] = {}
    for m in _GRADE_ID.finditer(data):
        prefix = m.group(1).decode().lower()
        if prefix in known:
            counts[prefix] = counts.get(prefix, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    top = [p for p, c in counts.items() if c == best]
    return top[0] if len(top) == 1 else None


def name_exercise(name: str) -> str | None:
    m = _EXERCISE.search(name)
    return f"ex{m.group(1)}" if m else None


def _walk(folder: Path) -> tuple[list[tuple[Path, str]], dict[str, str]]:
    """Every ``.ipynb`` entry under ``folder`` (links to folders not followed) and the other files."""
    found, other = [], {}
    for here, dirs, files in os.walk(folder):
        skipped = [d for d in dirs if d in SKIP_DIRS or d.startswith(".")]
        dirs[:] = sorted(d for d in dirs if d not in skipped)
        for d in skipped:
            other[(Path(here) / d).relative_to(folder).as_posix() + "/"] = (
                "a hidden or checkpoint folder"
            )
        for name in sorted(files):
            path = Path(here) / name
            rel = path.relative_to(folder).as_posix()
            if name.startswith("."):
                other[rel] = "a hidden file"
            elif not name.lower().endswith(".ipynb"):
                other[rel] = "not a notebook (.ipynb)"
            else:
                found.append((path, rel))
    return found, other


def collect(folder: Path, stems: list[str] | dict[str, object]) -> Collected:
    """Find each exercise of ``stems`` (notebook stems such as ``"ex02_scaled_dot_product_attention"``:
    the exercises graded, i.e. the assignment) in the student's ``folder``."""
    by_prefix = {s.split("_")[0].lower(): s for s in stems}
    out = Collected()
    if not folder.is_dir() or folder.is_symlink():
        for stem in by_prefix.values():
            out.status[stem] = MISSING
        return out
    files, out.ignored = _walk(folder)
    from mha_grader.registry import notebooks

    course = {s.split("_")[0].lower() for s in notebooks()}  # every exercise of the course
    groups: dict[str, list[_Candidate]] = {}
    if len(files) > MAX_NOTEBOOKS:  # the documented place first, then by depth and name
        files.sort(key=lambda f: (f[1].count("/"), f[1]))
        for _, rel in files[MAX_NOTEBOOKS:]:
            out.ignored[rel] = f"more than {MAX_NOTEBOOKS} notebooks in the folder: not read"
        files = files[:MAX_NOTEBOOKS]
    for path, rel in files:
        st = os.lstat(path)
        regular = stat.S_ISREG(st.st_mode) and st.st_nlink == 1
        data = _read(path) if regular else None
        by_content = content_exercise(data, course) if data is not None else None
        by_name = name_exercise(path.name)
        if by_name not in course:
            by_name = None
        ex = by_content or by_name
        if ex is None:
            out.ignored[rel] = (
                "neither its cells nor its name name a graded exercise (exNN_<topic>.ipynb)"
            )
            continue
        if ex not in by_prefix:
            out.ignored[rel] = f"{ex} is not part of this assignment"
            continue
        if by_content and by_name and by_content != by_name:
            out.notes.append(
                f"{rel}: its name says {by_name} but its cells are {by_content}'s: "
                f"taken as {by_content}"
            )
        groups.setdefault(ex, []).append(
            _Candidate(
                path,
                rel,
                regular,
                by_name,
                by_content,
                len(_STUB.findall(data)) if data is not None else 0,
                data if data is not None else rel.encode(),
            )
        )
    for prefix, stem in sorted(by_prefix.items()):
        cands = groups.get(prefix, [])
        if not cands:
            out.status[stem] = MISSING
            continue
        best, rule = _choose(stem, cands)
        out.taken[stem], out.source[stem] = best.path, best.rel
        distinct = {c.digest for c in cands}
        if len(distinct) > 1:
            out.status[stem], out.rule[stem] = COMPETING, rule
            others = ", ".join(c.rel for c in cands if c is not best)
            out.notes.append(
                f"{prefix}: {len(cands)} different files compete ({best.rel}, {others}); "
                f"graded {best.rel}: {rule}"
            )
        else:
            out.status[stem] = TAKEN if best.rel == f"{stem}.ipynb" else FOUND
            if best.rel != f"{stem}.ipynb":
                how = " and ".join(
                    w
                    for w, ok in (("its cells", best.by_content), ("its name", best.by_name))
                    if ok
                )
                out.notes.append(f"graded {best.rel} as {stem}.ipynb (found by {how})")
        for c in cands:
            if c is not best:
                same = c.digest == best.digest
                out.ignored[c.rel] = (
                    f"a copy of {best.rel} (identical)"
                    if same
                    else f"{prefix}: {best.rel} was graded instead ({rule})"
                )
    return out


def _choose(stem: str, cands: list[_Candidate]) -> tuple[_Candidate, str]:
    """The candidate the module's rule picks, and the rule's words."""
    exact = [c for c in cands if c.rel == f"{stem}.ipynb"]
    if exact:
        return exact[0], "the file at the documented place wins"
    fewest = min(c.stubs for c in cands)
    ranked = sorted(cands, key=lambda c: (c.stubs, c.rel.count("/"), c.rel))
    if sum(1 for c in cands if c.stubs == fewest) == 1:
        return ranked[
            0
        ], "the copy with the most tasks done (fewest NotImplementedError stubs) wins"
    return ranked[
        0
    ], "equal work: the file nearest the top of the folder, then the first by name, wins"


def summary_rows(student: str, got: Collected) -> list[list[str]]:
    """``OUT/collection.csv`` rows: student, exercise, status, file, rule or reason."""
    rows = [
        [student, stem, st, got.source.get(stem, ""), got.rule.get(stem, "")]
        for stem, st in sorted(got.status.items())
    ]
    rows += [[student, "", "ignored", rel, why] for rel, why in sorted(got.ignored.items())]
    return rows

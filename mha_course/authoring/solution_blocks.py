"""The solution blocks of a solution notebook (``solutions/exNN_*.ipynb``): tasks and hints.

A solution cell holds ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` blocks. A block holds
numbered hint levels, ``# HINT 1: ...`` (a nudge: where to look), ``# HINT 2: ...`` (the approach),
``# HINT 3: ...`` (close to the code); a level may go on over several lines with the same prefix.
The task number and title come from the ``## Task k — title`` heading above the solution cell;
``# TASK: <one line>`` in the block overrides the title shown in the stub. ``release`` turns each
block into a stub (:func:`stub_source`) and writes the levels, per exercise and task, to
``mha_course/grading/hints.json`` (:func:`hints_text`), which ``mha_course.hint("ex04", 3)`` reads
one level per call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_HINT = re.compile(r"^\s*# HINT(?:\s+(\d+))?\s*:\s?(.*)$")
_TASK = re.compile(r"^\s*# TASK:\s?(.*)$")
_HEADING = re.compile(r"^#+\s*Task\s+(\d+)\s*[—:-]*\s*(.*?)\s*(?:\(\d+(?:\.\d+)? points?\))?\s*$")


def grade_id(cell) -> str:
    """The cell's nbgrader ``grade_id`` (its graded item's id on a solution cell), or ``""``."""
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


@dataclass
class Task:
    """One solution cell: the exercise's prefix (``ex04``), its task number and title, its levels."""

    exercise: str
    number: int
    title: str
    item: str = ""
    levels: list[str] = field(default_factory=list)

    def call(self) -> str:
        return f'from mha_course import hint; hint("{self.exercise}", {self.number})'

    def comment(self) -> str:
        return f"# TASK {self.number} — {self.title}. Stuck? {self.call()}"

    def message(self) -> str:
        return f"task {self.number} ({self.title}) is not written yet. Stuck? {self.call()}"


def _map_blocks(source: str, rewrite) -> str:
    """Replace each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block of ``source`` by
    ``rewrite(indent, begin_line, body_lines, end_line) -> lines``."""
    out: list[str] = []
    block: list[str] | None = None
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            block, begin = [], line
        elif stripped == END and block is not None:
            out += rewrite(begin[: len(begin) - len(begin.lstrip())], begin, block, line)
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"source: {BEGIN} without {END}")
    return "\n".join(out)


def _blocks(source: str) -> list[list[str]]:
    found: list[list[str]] = []
    _map_blocks(source, lambda indent, begin, block, end: found.append(block) or [])
    return found


def levels(source: str, where: str = "source") -> list[str]:
    """The hint levels of one cell's solution blocks: ``# HINT k:`` lines, numbered 1, 2, ...
    without gaps (consecutive lines with the same number form one level)."""
    by_level: dict[int, list[str]] = {}
    for block in _blocks(source):
        for m in filter(None, map(_HINT.match, block)):
            if m.group(1) is None:
                raise ValueError(
                    f"{where}: '# HINT:' without a level; write '# HINT 1:', '# HINT 2:', ... "
                    "(see docs/grading.md, 'Hints')"
                )
            by_level.setdefault(int(m.group(1)), []).append(m.group(2).rstrip())
    if sorted(by_level) != list(range(1, len(by_level) + 1)):
        raise ValueError(
            f"{where}: hint levels must be 1, 2, ... without gaps, got {sorted(by_level)}"
        )
    return ["\n".join(by_level[k]) for k in sorted(by_level)]


def _task_override(source: str) -> str:
    for block in _blocks(source):
        for m in filter(None, map(_TASK.match, block)):
            return m.group(1).strip()
    return ""


def _is_hint_or_task(line: str) -> bool:
    return bool(_HINT.match(line) or _TASK.match(line))


def stub_source(source: str, task: Task | None = None) -> str:
    """Replace every solution block in one cell's source by the task line and
    ``raise NotImplementedError`` (no hint text)."""
    task = task or Task("ex", 0, _task_override(source) or "write this function")

    def stub(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        return [
            f"{indent}{task.comment()}",
            f"{indent}raise NotImplementedError({task.message()!r})",
        ]

    return _map_blocks(source, stub)


def task_outside(source: str, task: Task) -> str:
    """Move each solution block's task line to just above its ``### BEGIN SOLUTION`` (nbgrader's
    stub keeps it) and drop its hint lines (they are in hints.json, not in what students get)."""

    def lift(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        return [
            f"{indent}{task.comment()}",
            begin,
            *(b for b in block if not _is_hint_or_task(b)),
            end,
        ]

    return _map_blocks(source, lift)


def tasks(nb: nbformat.NotebookNode, stem: str) -> dict[int, Task]:
    """Cell index -> its ``Task`` for every code cell with a solution block, numbered by the
    ``## Task k — title`` heading above it."""
    heading: tuple[int, str] | None = None
    out: dict[int, Task] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for line in cell.source.split("\n"):
                m = _HEADING.match(line)
                if m:
                    heading = (int(m.group(1)), m.group(2))
                elif line.startswith("#"):
                    heading = None
        elif BEGIN in cell.source:
            where = f"{stem} cell {i}"
            if heading is None:
                raise ValueError(
                    f"{where}: a solution cell needs a '## Task k — title' heading above it"
                )
            if any(t.number == heading[0] for t in out.values()):
                raise ValueError(f"{where}: task {heading[0]} has a second solution cell")
            out[i] = Task(
                stem.split("_")[0],
                heading[0],
                _task_override(cell.source) or heading[1],
                grade_id(cell),
                levels(cell.source, where),
            )
            if len(out[i].levels) < 2:
                raise ValueError(
                    f"{where}: every task needs at least two hint levels ('# HINT 1:' a nudge, "
                    f"'# HINT 2:' the approach), got {len(out[i].levels)}"
                )
    return out


def hints_table(solutions: Path) -> dict[str, dict[str, dict]]:
    """Exercise stem -> task number (a string, as JSON keys are) -> its item, title and levels."""
    table: dict[str, dict[str, dict]] = {}
    for sol in sorted(solutions.glob("ex*.ipynb")):
        found = tasks(nbformat.read(sol, as_version=4), sol.stem).values()
        table[sol.stem] = {
            str(t.number): {"item": t.item, "title": t.title, "levels": t.levels}
            for t in sorted(found, key=lambda t: t.number)
        }
    return table


def hints_text(solutions: Path) -> str:
    return json.dumps(hints_table(solutions), indent=1, ensure_ascii=False) + "\n"

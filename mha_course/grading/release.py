"""solutions/ -> exercises/: each solution block becomes a stub that raises NotImplementedError.

Between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` only ``# HINT:`` lines survive; the
stub's message is the hints (or the item's task). Outputs and execution counts are cleared, so
the file written is deterministic and ``--check`` can compare it byte for byte.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_HINT = re.compile(r"^\s*# HINT:\s?(.*)$")


def stub_source(source: str, task: str = "") -> str:
    """Replace every solution block in one cell's source by hints + ``raise NotImplementedError``."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped == END and block is not None:
            hints = [m.group(1) for m in map(_HINT.match, block) if m]
            out += [f"{indent}# HINT: {h}" for h in hints]
            message = " ".join(hints) or task or "write this function"
            out.append(f"{indent}raise NotImplementedError({message!r})")
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"source: {BEGIN} without {END}")
    return "\n".join(out)


def exercise_from_solution(solution: Path) -> str:
    """The exercise notebook's text for one solution notebook."""
    from mha_grader.registry import all_items

    tasks = {it.id: it.task for it in all_items()}
    nb = nbformat.read(solution, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
            if BEGIN in cell.source:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
                cell.source = stub_source(cell.source, tasks.get(grade_id, ""))
    nb.metadata.pop("widgets", None)
    return nbformat.writes(nb) + "\n"


def release(solutions: Path, exercises: Path, check: bool = False) -> list[Path]:
    """Write (or with ``check``, only compare) ``exercises/`` from ``solutions/``.

    Returns the exercise files that were (or, with ``check``, would be) changed.
    """
    changed = []
    for sol in sorted(solutions.glob("ex*.ipynb")):
        target = exercises / sol.name
        text = exercise_from_solution(sol)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            changed.append(target)
            if not check:
                exercises.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    stale = [p for p in sorted(exercises.glob("ex*.ipynb")) if not (solutions / p.name).exists()]
    return changed + stale

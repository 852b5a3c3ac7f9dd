"""solutions/ -> exercises/ (the course's student copies) and -> an nbgrader source folder.

Student copy (``exercises/``): between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` only
``# HINT:`` lines survive; the stub's message is the hints (or the item's task). After each item's
section an nbgrader **test cell** (graded, locked, points = the item's points) runs the course's
check of that item on the learners' inputs (seed 12345). Outputs and execution counts are
cleared, so the file written is deterministic and ``--check`` can compare it byte for byte.

nbgrader source (``mha-course release --nbgrader COURSE``): the solutions with the hints moved
just above ``### BEGIN SOLUTION`` (so nbgrader's own stub keeps them) and the same test cells,
each with a ``### BEGIN HIDDEN TESTS`` region that checks again on inputs from the instructor's
seed. ``nbgrader generate_assignment`` removes that region from the student version and
``nbgrader autograde`` puts it back, so the seed is only ever in the instructor's files and the
student version equals ``exercises/`` except for the stub lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from mha_grader.items import Item

from .nbgrader_tests import LEARNER_SEED  # the seed check() uses: inputs learners may see

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_HINT = re.compile(r"^\s*# HINT:\s?(.*)$")


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


def _hints(block: list[str]) -> list[str]:
    return [m.group(1) for m in map(_HINT.match, block) if m]


def stub_source(source: str, task: str = "") -> str:
    """Replace every solution block in one cell's source by hints + ``raise NotImplementedError``."""
    def stub(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        hints = _hints(block)
        message = " ".join(hints) or task or "write this function"
        return [f"{indent}# HINT: {h}" for h in hints] + [f"{indent}raise NotImplementedError({message!r})"]

    return _map_blocks(source, stub)


def hints_outside(source: str, task: str = "") -> str:
    """Move each solution block's ``# HINT:`` lines (or, with none, ``# TASK: <task>``) to just
    above its ``### BEGIN SOLUTION``, where nbgrader's stub keeps them."""
    def lift(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        hints = [f"{indent}# HINT: {h}" for h in _hints(block)]
        hints = hints or ([f"{indent}# TASK: {task}"] if task else [])
        return [*hints, begin, *(b for b in block if not _HINT.match(b)), end]

    return _map_blocks(source, lift)


def test_cell_source(item: Item, seed: int | None = None) -> str:
    """The nbgrader test cell of ``item``; with ``seed``, the hidden re-check on that seed."""
    lines = [f"# Graded test: {item.id} ({item.points:g} point{'s' if item.points != 1 else ''}), "
             f"the course's check of `{item.function}`.",
             "from mha_course.grading.nbgrader_tests import assert_item",
             "",
             f'assert_item("{item.id}")  # the learners\' inputs (seed {LEARNER_SEED}, as check() uses)']
    if seed is not None:
        lines += [HIDDEN_BEGIN,
                  f'assert_item("{item.id}", seed={int(seed)})  # fresh inputs: only the instructor has them',
                  HIDDEN_END]
    return "\n".join(lines)


def test_cell(item: Item, seed: int | None = None) -> nbformat.NotebookNode:
    """A graded, locked nbgrader test cell worth the item's points (deterministic cell id)."""
    cell = nbformat.v4.new_code_cell(test_cell_source(item, seed))
    cell.id = f"{item.id}-test"[:64]
    cell.metadata = nbformat.from_dict({
        "nbgrader": {"grade": True, "grade_id": f"{item.id}_test", "locked": True,
                     "points": item.points, "schema_version": 3, "solution": False},
        "tags": ["graded-check"],
    })
    return cell


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _with_test_cells(cells: list, items: dict[str, Item], seed: int | None) -> list:
    """Insert each item's test cell at the end of its section: after its solution cell and the
    code cells that follow it (its self-checks), before the next markdown or solution cell."""
    out, pending = [], None
    for cell in cells:
        is_solution = cell.metadata.get("nbgrader", {}).get("solution", False)
        ends_section = cell.cell_type != "code" or is_solution or \
            "graded-check" in cell.metadata.get("tags", [])
        if pending is not None and ends_section:
            out.append(test_cell(pending, seed))
            pending = None
        out.append(cell)
        if is_solution and _grade_id(cell) in items:
            pending = items[_grade_id(cell)]
    if pending is not None:
        out.append(test_cell(pending, seed))
    return out


def _read(solution: Path) -> tuple[nbformat.NotebookNode, dict[str, Item]]:
    from mha_grader.registry import all_items

    nb = nbformat.read(solution, as_version=4)
    items = {it.id: it for it in all_items() if it.notebook == solution.stem}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb, items


def exercise_from_solution(solution: Path) -> str:
    """The exercise notebook's text for one solution notebook."""
    nb, items = _read(solution)
    for cell in nb.cells:
        if cell.cell_type == "code" and BEGIN in cell.source:
            it = items.get(_grade_id(cell))
            cell.source = stub_source(cell.source, it.task if it else "")
    nb.cells = _with_test_cells(nb.cells, items, seed=None)
    return nbformat.writes(nb) + "\n"


def nbgrader_source(solution: Path, seed: int) -> str:
    """The nbgrader source notebook for one solution notebook (hidden tests on ``seed``)."""
    nb, items = _read(solution)
    for cell in nb.cells:
        if cell.cell_type == "code" and BEGIN in cell.source:
            it = items.get(_grade_id(cell))
            cell.source = hints_outside(cell.source, it.task if it else "")
    nb.cells = _with_test_cells(nb.cells, items, seed=seed)
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


NBGRADER_CONFIG = '''\
# Written by `mha-course release --nbgrader`. nbgrader reads this from the course folder.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "mha-course"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# Feedback shows each test cell's output but not its hidden region (which holds the seed).
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
'''


def release_nbgrader(solutions: Path, course: Path, assignment: str, seed: int,
                     names: list[str] | None = None) -> list[Path]:
    """Write ``COURSE/source/ASSIGNMENT/exNN_<topic>.ipynb`` (and a minimal
    ``nbgrader_config.py`` if the course has none). ``names``: exercise prefixes or stems to
    include (default: all). Returns the notebooks written."""
    from mha_grader.registry import resolve

    if not re.fullmatch(r"[A-Za-z0-9_\-]+", assignment):
        raise ValueError(f"assignment: expected a folder name of letters, digits, - and _, got {assignment!r}")
    wanted = {resolve(n) for n in names} if names else None
    source = course / "source" / assignment
    source.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(NBGRADER_CONFIG, encoding="utf-8")
    written = []
    for sol in sorted(solutions.glob("ex*.ipynb")):
        if wanted is None or sol.stem in wanted:
            target = source / sol.name
            target.write_text(nbgrader_source(sol, seed), encoding="utf-8")
            written.append(target)
    return written

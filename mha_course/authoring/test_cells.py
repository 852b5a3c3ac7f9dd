"""The nbgrader test cells ``release`` puts after each graded item's section.

Each is graded and locked, worth the item's points, and runs the course's check of that item on
the learners' inputs (seed ``LEARNER_SEED``, as ``check()`` uses). In the nbgrader source a
``### BEGIN HIDDEN TESTS`` region checks again on inputs from the instructor's seed:
``nbgrader generate_assignment`` removes it from the student version and ``nbgrader autograde``
puts it back, so the seed is only ever in the instructor's files.
"""

from __future__ import annotations

import nbformat

from mha_course.authoring.solution_blocks import grade_id
from mha_course.grading.nbgrader_tests import (
    LEARNER_SEED,  # the seed check() uses: inputs learners may see
)
from mha_grader.compare import dtype_rule, reference_dtypes
from mha_grader.items import Item

HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def test_cell_source(item: Item, seed: int | None = None) -> str:
    """The nbgrader test cell of ``item``; with ``seed``, the hidden re-check on that seed."""
    lines = [
        f"# Graded test: {item.id} ({item.points:g} point{'s' if item.points != 1 else ''}), "
        f"the course's check of `{item.function}`.",
        f"# dtype rule: {dtype_rule(item, reference_dtypes(item) if item.dtype_must_match else None)}.",
        "from mha_course.grading.nbgrader_tests import assert_item",
        "",
        f'assert_item("{item.id}")  # the learners\' inputs (seed {LEARNER_SEED}, as check() uses)',
    ]
    if seed is not None:
        lines += [
            HIDDEN_BEGIN,
            f'assert_item("{item.id}", seed={int(seed)})  # fresh inputs: only the instructor has them',
            HIDDEN_END,
        ]
    return "\n".join(lines)


def test_cell(item: Item, seed: int | None = None) -> nbformat.NotebookNode:
    """A graded, locked nbgrader test cell worth the item's points (deterministic cell id)."""
    cell = nbformat.v4.new_code_cell(test_cell_source(item, seed))
    cell.id = f"{item.id}-test"[:64]
    cell.metadata = nbformat.from_dict(
        {
            "nbgrader": {
                "grade": True,
                "grade_id": f"{item.id}_test",
                "locked": True,
                "points": item.points,
                "schema_version": 3,
                "solution": False,
            },
            "tags": ["graded-check"],
        }
    )
    return cell


def with_test_cells(cells: list, items: dict[str, Item], seed: int | None) -> list:
    """Insert each item's test cell at the end of its section: after its solution cell and the
    code cells that follow it (its self-checks), before the next markdown or solution cell."""
    out, pending = [], None
    for cell in cells:
        is_solution = cell.metadata.get("nbgrader", {}).get("solution", False)
        ends_section = (
            cell.cell_type != "code"
            or is_solution
            or "graded-check" in cell.metadata.get("tags", [])
        )
        if pending is not None and ends_section:
            out.append(test_cell(pending, seed))
            pending = None
        out.append(cell)
        if is_solution and grade_id(cell) in items:
            pending = items[grade_id(cell)]
    if pending is not None:
        out.append(test_cell(pending, seed))
    return out

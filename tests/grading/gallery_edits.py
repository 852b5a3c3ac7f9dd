"""Gallery cases made by editing a solution cell (for long items, where pasting the whole solution
with one line changed would copy it): ``edited("ex16", "ex16_serve", [(old, new), ...])``."""

from __future__ import annotations

import nbformat
from grading_helpers import solution


def edited(name: str, grade_id: str, edits: list[tuple[str, str]]) -> str:
    """The source of ``grade_id``'s solution cell, solution markers and hints dropped, with each
    ``old`` (which must occur exactly once) replaced by ``new``."""
    nb = nbformat.read(solution(name), as_version=4)
    src = next(
        c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    src = "\n".join(ln for ln in src.split("\n") if "### " not in ln and "# HINT" not in ln)
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(
                f"edits: expected {old!r} once in {grade_id}'s solution, found {src.count(old)}"
            )
        src = src.replace(old, new)
    return src

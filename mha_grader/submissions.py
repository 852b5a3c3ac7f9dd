"""Make submissions from a solution notebook (for tests, the gallery and the benchmark)."""

from __future__ import annotations

from pathlib import Path

import nbformat


def make_submission(
    solution: Path,
    dest: Path,
    replace: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    extra: list[tuple[int, str]] = (),
) -> Path:
    """Copy ``solution`` to ``dest`` with edits: cells whose grade id is in ``replace`` get that
    source, those in ``drop`` are removed, ``extra = [(position, source)]`` code cells inserted."""
    nb = nbformat.read(solution, as_version=4)
    cells = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in drop:
            continue
        if gid in (replace or {}):
            cell.source = replace[gid].strip("\n")
        cells.append(cell)
    for pos, src in extra:
        cells.insert(pos if pos >= 0 else len(cells) + 1 + pos, nbformat.v4.new_code_cell(src))
    nb.cells = cells
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return dest

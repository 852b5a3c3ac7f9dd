"""Read a learner's notebook as DATA (JSON), never run it here: which code cells to run.

Skipped: markdown/raw cells, cells tagged ``self-check`` or ``graded-check``, cells that call
the grader (``mha_course.grading``), and cell magics (``%%``). Line magics and shell lines
(``!``, ``%``) become ``pass`` at the same indentation, so the rest of the cell still runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
SKIP_TAGS = frozenset({"self-check", "graded-check"})
_MAGIC = re.compile(r"^(\s*)[!%]")


class InvalidNotebook(ValueError):
    """The file is not a readable notebook (bad JSON, no cells, too big)."""


def strip_magics(source: str) -> str | None:
    """Replace ``!cmd`` / ``%magic`` lines by ``pass``; ``None`` for a ``%%`` cell magic."""
    if source.lstrip().startswith("%%"):
        return None
    return "\n".join(
        _MAGIC.sub(r"\1pass  # ", line) if _MAGIC.match(line) else line
        for line in source.split("\n")
    )


def code_cells(path: str | Path) -> list[dict]:
    """``[{"index": i, "source": str}]`` for the cells the grader runs, in order."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise InvalidNotebook(f"notebook is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB")
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InvalidNotebook(f"cannot read {path.name} as notebook JSON: {e}"[:300]) from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise InvalidNotebook(f"{path.name} has no list of cells")
    out = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise InvalidNotebook(f"cell {i}: source is neither text nor a list of lines")
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        tags = meta.get("tags") if isinstance(meta.get("tags"), list) else []
        if SKIP_TAGS & {t for t in tags if isinstance(t, str)} or "mha_course.grading" in src:
            continue
        src = strip_magics(src)
        if src is not None and src.strip():
            out.append({"index": i, "source": src})
    return out

"""A learner's work in ``exercises/``: recognised before ``mha-course release`` writes a notebook
again, and backed up first, so regenerating the exercises never loses it.

A generated exercise has no outputs, no execution counts, and a ``raise NotImplementedError(...)``
stub in every task cell. An exercise on disk "holds work" when it has outputs or execution counts,
a task cell whose stub is gone (filled in), or a code cell the generated version does not have
(one the learner added). Unreadable notebooks count as work too (they are kept, not judged).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat

STUB = "raise NotImplementedError("


def holds_work(on_disk: str, generated: str) -> bool:
    """Whether the exercise text ``on_disk`` holds more than the ``generated`` one would give back."""
    try:
        old = nbformat.reads(on_disk, as_version=4)
    except Exception:  # noqa: BLE001 - whatever it is, it is the learner's file: keep it
        return True
    new = nbformat.reads(generated, as_version=4)
    new_code = {c.get("id"): c.source for c in new.cells if c.cell_type == "code"}
    for cell in old.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("outputs") or cell.get("execution_count"):
            return True
        if cell.get("id") not in new_code:
            if cell.source.strip():
                return True
        elif STUB in new_code[cell.get("id")] and STUB not in cell.source:
            return True
    return False


def backup_folder(exercises: Path, when: float | None = None) -> Path:
    """``exercises/backup-YYYYmmdd-HHMMSS/`` (visible in the Lab's file browser; git ignores it)."""
    return exercises / time.strftime("backup-%Y%m%d-%H%M%S", time.localtime(when))


def back_up(target: Path, folder: Path) -> Path:
    """Copy ``target`` into ``folder`` (made if needed); returns the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / target.name
    shutil.copy2(target, dest)
    return dest

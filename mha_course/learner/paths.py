"""Finding a learner's notebook or folder from wherever the learner stands (a Lab terminal, a
``!``-line in a notebook, the repository root): ``mha-course check`` and ``progress`` use it."""

from __future__ import annotations

import os
from pathlib import Path


def locate(notebook: Path) -> Path | None:
    """``notebook`` as given, or else relative to a folder above the current one, or to the Lab's
    root (``$JUPYTER_SERVER_ROOT``, set in Lab terminals): the command the exercises print,
    ``mha-course check exercises/exNN_....ipynb``, then works from ``exercises/`` and ``notebooks/``
    too (a Lab terminal or a ``!``-line starts in the notebook's folder), not only from the root."""
    return _find(notebook, Path.is_file)


def locate_folder(folder: Path) -> Path | None:
    """The same lookup for a folder (``mha-course progress exercises``)."""
    return _find(folder, Path.is_dir)


def _find(path: Path, exists) -> Path | None:
    if exists(path) or path.is_absolute():
        return path if exists(path) else None
    server_root = os.environ.get("JUPYTER_SERVER_ROOT")
    bases = [*Path.cwd().parents, *([Path(server_root)] if server_root else [])]
    return next((Path(os.path.relpath(base / path)) for base in bases if exists(base / path)), None)

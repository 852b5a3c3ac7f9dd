"""Execute notebooks top to bottom in place (outputs committed, as nbval expects).

    python tools/execute.py notebooks/01_dot_product_attention.ipynb [more.ipynb ...]

Runs each in its own folder with the kernel named in the notebook, prints the wall time, and
drops per-cell timing metadata so re-running leaves a clean diff. Consecutive stream outputs are
merged and carriage returns applied (nbconvert's CoalesceStreamsPreprocessor), so a text progress
bar is committed in its finished state (100%), not as every intermediate redraw.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor


def execute(path: Path, timeout: int = 300) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    coalesce = CoalesceStreamsPreprocessor()
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        coalesce.preprocess_cell(cell, {}, index)  # progress bars: keep only their final state
    nb.metadata.pop("widgets", None) if not _has_widgets(nb) else None
    nbformat.write(nb, path)
    return seconds


def _has_widgets(nb) -> bool:
    return any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"{arg}: {execute(Path(arg)):.1f} s", flush=True)

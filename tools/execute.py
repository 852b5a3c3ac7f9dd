"""Execute notebooks top to bottom in place (outputs committed, as nbval expects).

    python tools/execute.py notebooks/01_dot_product_attention.ipynb [more.ipynb ...]

Runs each in its own folder with the kernel named in the notebook, prints the wall time (a
lecture's is kept in tools/notebook_run_times.json: tools/chapter_times.py adds it to the time
the chapter states), and drops per-cell timing metadata so re-running leaves a clean diff. Consecutive stream outputs are
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_times  # noqa: E402  (tools/ is not a package)


def run(nb, path: Path, timeout: int = 300) -> float:
    """Execute ``nb`` (read from ``path``) in its own folder, in place in memory; the wall seconds."""
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return time.perf_counter() - start


def execute(path: Path, timeout: int = 300) -> float:
    nb = nbformat.read(path, as_version=4)
    seconds = run(nb, path, timeout)
    if path.parent.name == "notebooks":  # a lecture: its run time goes into its stated time
        run_times.record_run_time(path, seconds)
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

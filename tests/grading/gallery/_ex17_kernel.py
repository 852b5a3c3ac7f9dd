"""Exercise 17's solution kernels with edits: the gallery's wrong Triton kernels (one line each),
of the forward (``ITEM``) and of the optional dQ kernel (``DQ_ITEM``).

Not a gallery case itself (the gallery reads ``ex*.py``); its cases load it with ``runpy`` by
path, so they run wherever the gallery is read (the tests, ``benchmarks/grade_class.py``)."""

from __future__ import annotations

from pathlib import Path

import nbformat

ITEM = "ex17_triton_forward"
DQ_ITEM = "ex17_triton_dq"
SOLUTION = Path(__file__).resolve().parents[3] / "solutions" / "ex17_flash_attention_triton.ipynb"


def kernel_with(*edits: tuple[str, str], item: str = ITEM) -> str:
    """The solution's kernel cell of ``item`` (``flash_fwd_kernel``, or ``flash_dq_kernel`` for
    ``DQ_ITEM``) with each ``(old, new)`` replaced in its code (once, exactly; the ``# HINT``
    comments are left alone)."""
    nb = nbformat.read(SOLUTION, as_version=4)
    src = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == item)
    lines = src.split("\n")
    for old, new in edits:
        code = [
            i for i, line in enumerate(lines) if old in line and not line.lstrip().startswith("#")
        ]
        assert len(code) == 1, f"{old!r} is not in the solution's kernel code exactly once"
        lines[code[0]] = lines[code[0]].replace(old, new)
    return "\n".join(lines)

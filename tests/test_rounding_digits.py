"""No compared notebook output prints the digits of a float64 rounding error.

The size of a float64 rounding gap (``1.7e-16`` or ``3.3e-16``) depends on the CPU's vector kernels
and the torch build: the committed outputs were made on one machine, strict nbval reran them on
another, and nine cells failed that way. A cell whose output nbval compares prints the bound it
asserts (``max diff < 1e-14``) instead; a cell that wants the figure itself marks its output
``# NBVAL_IGNORE_OUTPUT`` and asserts the bound in code.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# A number in scientific notation below 1e-13 with a decimal mantissa (a bound such as "< 1e-14" is
# written without one). Chapter 2's 5.16e-13, the norm of a saturated softmax's Jacobian, is a value
# the maths gives, not a rounding gap, and stays.
ROUNDING_DIGITS = re.compile(r"\b\d\.\d+e-(?:1[4-9]|[2-9]\d|\d{3})\b")


def _compared(cell) -> bool:
    return "NBVAL_IGNORE_OUTPUT" not in cell.source and "nbval-ignore-output" not in cell.get(
        "metadata", {}
    ).get("tags", [])


def _printed(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "text/plain" in out.get("data", {}):
            parts.append(out["data"]["text/plain"])
    return "".join(parts)


def rounding_digits(nb) -> list[tuple[int, list[str]]]:
    """(code cell index, the figures) for every compared cell that prints a rounding error's digits."""
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        figures = ROUNDING_DIGITS.findall(_printed(cell)) if _compared(cell) else []
        if figures:
            found.append((i, figures))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_rounding_digits_in_compared_outputs(path):
    found = rounding_digits(nbformat.read(path, as_version=4))
    assert not found, (
        f"{path.name}: code cells print float64 rounding errors whose digits differ from CPU to CPU "
        f"(cell index, figures): {found}; print the bound the cell asserts instead"
    )


def _notebook(source: str, text: str):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [cell]
    return nb


@pytest.mark.parametrize(
    ("source", "text", "caught"),
    [
        ("print(d)", "max diff 1.7e-16\n", True),
        ("print(d)", "max |a - b| = 2.2e-14\n", True),
        ("print(d)", "relative error 3.4e-120\n", True),
        ("print(d)", "max diff < 1e-14\n", False),  # the bound, no digits
        ("print(d)", "float32 error 4.2e-07\n", False),  # above float64 rounding
        ("# NBVAL_IGNORE_OUTPUT\nprint(d)", "max diff 1.7e-16\n", False),  # not compared
    ],
)
def test_detector_caught(source, text, caught):
    assert bool(rounding_digits(_notebook(source, text))) == caught

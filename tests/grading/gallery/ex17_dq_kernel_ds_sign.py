"""ex17 (optional dQ kernel): dS = P * (D - dP): the softmax backward's sign reversed."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        ("ds = p * (dp - delta[:, None])", "ds = p * (delta[:, None] - dp)"), item=ITEM
    )
}
EXPECT = {ITEM: ("wrong values", "dS sign")}

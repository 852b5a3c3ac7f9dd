"""ex17: the causal mask cols < rows: each query loses its own key."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("cols[None, :] <= rows[:, None]", "cols[None, :] < rows[:, None]"))}
EXPECT = {ITEM: ("wrong values", "off by one")}

"""ex17: causal blocks skipped, but no mask inside the diagonal block."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep"))}
EXPECT = {ITEM: ("wrong values", "no causal mask")}

"""ex17 (optional dQ kernel): IS_CAUSAL ignored: every key block visited, no causal mask."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        ("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = S"),
        ("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep"),
        item=ITEM,
    )
}
EXPECT = {ITEM: ("wrong values", "not causal")}

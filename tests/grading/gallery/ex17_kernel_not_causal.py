"""ex17: IS_CAUSAL ignored: neither block skipping nor the mask."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        ("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = S"),
        ("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep"),
    )
}
EXPECT = {ITEM: ("wrong values", "not causal")}

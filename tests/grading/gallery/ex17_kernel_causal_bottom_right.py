"""ex17: the causal diagonal aligned bottom-right (j <= i + S - L), mask and skip alike."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "keep = keep & (cols[None, :] <= rows[:, None])",
            "keep = keep & (cols[None, :] <= rows[:, None] + S - L)",
        ),
        (
            "hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S",
            "hi = tl.minimum(S, start_m + BLOCK_M + S - L) if IS_CAUSAL else S",
        ),
    )
}
EXPECT = {ITEM: ("wrong values", "bottom-right")}

"""ex17: the causal loop bound uses BLOCK_N, not the query block's BLOCK_M rows."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S",
            "hi = tl.minimum(S, start_m + BLOCK_N) if IS_CAUSAL else S",
        )
    )
}
EXPECT = {ITEM: ("wrong values", "stop by BLOCK_N")}

"""ex17 (optional dQ kernel): the causal loop stops before the query block's own (diagonal) key block."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S",
            "hi = tl.minimum(S, start_m) if IS_CAUSAL else S",
        ),
        item=ITEM,
    )
}
EXPECT = {ITEM: ("wrong values", "diagonal block skipped")}

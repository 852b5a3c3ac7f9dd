"""ex17: key blocks skipped in the non-causal case too."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S",
            "hi = tl.minimum(S, start_m + BLOCK_M)",
        )
    )
}
EXPECT = {ITEM: ("wrong values", "skipped when not causal")}

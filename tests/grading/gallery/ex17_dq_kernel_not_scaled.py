"""ex17 (optional dQ kernel): dQ stored without the final factor scale."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "tl.store(DQ + q_offs, dq * scale, mask=q_mask)",
            "tl.store(DQ + q_offs, dq, mask=q_mask)",
        ),
        item=ITEM,
    )
}
EXPECT = {ITEM: ("wrong values", "dQ not scaled")}

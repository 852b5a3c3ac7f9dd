"""ex17 (optional dQ kernel): the recomputed P lacks the softmax scale: exp(q k^T - lse)."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "p = tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None])",
            "p = tl.exp(tl.dot(q, tl.trans(k)) - lse[:, None])",
        ),
        item=ITEM,
    )
}
EXPECT = {ITEM: ("wrong values", "P without the scale")}

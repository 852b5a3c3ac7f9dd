"""ex17 (optional dQ kernel): k and v loaded with a mask but no other=0.0 (undefined lanes on a GPU)."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        (
            "k = tl.load(K + kv_offs, mask=kv_mask, other=0.0)",
            "k = tl.load(K + kv_offs, mask=kv_mask)",
        ),
        (
            "v = tl.load(V + kv_offs, mask=kv_mask, other=0.0)",
            "v = tl.load(V + kv_offs, mask=kv_mask)",
        ),
        item=ITEM,
    )
}
EXPECT = {ITEM: ("non-finite", "masked loads without other")}

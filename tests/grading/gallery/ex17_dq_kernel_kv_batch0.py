"""ex17 (optional dQ kernel): the kv head without the batch: every batch reads batch 0's keys and values."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["DQ_ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        ("kv = (bh // H) * G + (bh % H) // (H // G)", "kv = (bh % H) // (H // G)"), item=ITEM
    )
}
EXPECT = {ITEM: ("wrong values", "kv of batch 0")}

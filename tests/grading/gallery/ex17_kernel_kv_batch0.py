"""ex17: GQA: the batch offset of the kv head forgotten (every batch reads batch 0)."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(("kv = (bh // H) * G + (bh % H) // (H // G)", "kv = (bh % H) // (H // G)"))
}
EXPECT = {ITEM: ("wrong values", "kv of batch 0")}

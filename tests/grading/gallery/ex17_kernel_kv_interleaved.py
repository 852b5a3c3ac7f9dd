"""ex17: GQA: query head h reads kv head h % G (interleaved), not h // (H // G)."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(
        ("kv = (bh // H) * G + (bh % H) // (H // G)", "kv = (bh // H) * G + (bh % H) % G")
    )
}
EXPECT = {ITEM: ("wrong values", "kv heads interleaved")}

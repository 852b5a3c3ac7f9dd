"""ex17: GQA: query head h reads kv head h % G (interleaved), not h // (H // G)."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("kv = (bh // H) * G + (bh % H) // (H // G)", "kv = (bh // H) * G + (bh % H) % G"))}
EXPECT = {ITEM: ("wrong values", "kv heads interleaved")}

"""ex17: GQA: the batch offset of the kv head forgotten (every batch reads batch 0)."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("kv = (bh // H) * G + (bh % H) // (H // G)", "kv = (bh % H) // (H // G)"))}
EXPECT = {ITEM: ("wrong values", "kv of batch 0")}

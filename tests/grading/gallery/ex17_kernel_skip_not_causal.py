"""ex17: key blocks skipped in the non-causal case too."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = tl.minimum(S, start_m + BLOCK_M)"))}
EXPECT = {ITEM: ("wrong values", "skipped when not causal")}

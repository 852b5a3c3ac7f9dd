"""ex17: the causal loop stops before the query block's own (diagonal) key block."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = tl.minimum(S, start_m) if IS_CAUSAL else S"))}
EXPECT = {ITEM: ("wrong values", "diagonal block skipped")}

"""ex17: IS_CAUSAL ignored: neither block skipping nor the mask."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = S"), ("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep"))}
EXPECT = {ITEM: ("wrong values", "not causal")}

"""ex17: the causal diagonal aligned bottom-right (j <= i + S - L), mask and skip alike."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep & (cols[None, :] <= rows[:, None] + S - L)"), ("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = tl.minimum(S, start_m + BLOCK_M + S - L) if IS_CAUSAL else S"))}
EXPECT = {ITEM: ("wrong values", "bottom-right")}

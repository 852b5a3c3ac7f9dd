"""ex17: causal blocks skipped, but no mask inside the diagonal block."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("keep = keep & (cols[None, :] <= rows[:, None])", "keep = keep"))}
EXPECT = {ITEM: ("wrong values", "no causal mask")}

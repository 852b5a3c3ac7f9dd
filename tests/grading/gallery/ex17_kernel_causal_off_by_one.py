"""ex17: the causal mask cols < rows: each query loses its own key."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("cols[None, :] <= rows[:, None]", "cols[None, :] < rows[:, None]"))}
EXPECT = {ITEM: ("wrong values", "off by one")}

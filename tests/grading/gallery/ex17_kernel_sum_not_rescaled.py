"""ex17: the running row sum not rescaled when the running max grows."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("row_sum = alpha * row_sum +", "row_sum = row_sum +"))}
EXPECT = {ITEM: ("wrong values", "row sum not rescaled")}

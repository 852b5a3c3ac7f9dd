"""ex17: the accumulator not rescaled when the running max grows."""
from kernel_edits import ITEM, kernel_with

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("acc = acc * alpha[:, None] +", "acc = acc +"))}
EXPECT = {ITEM: ("wrong values", "accumulator not rescaled")}

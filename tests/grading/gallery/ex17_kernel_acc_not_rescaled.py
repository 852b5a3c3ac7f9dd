"""ex17: the accumulator not rescaled when the running max grows."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("acc = acc * alpha[:, None] +", "acc = acc +"))}
EXPECT = {ITEM: ("wrong values", "accumulator not rescaled")}

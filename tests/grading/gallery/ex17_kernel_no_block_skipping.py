"""ex17: causal kernel that loops over every key block and only masks (no block skipping).

Found by the newcomer's try: the item claimed to grade causal block skipping, but this kernel
scored full marks (masking alone gives the right values). The causal L < S case now holds NaN
in the keys no row can see, which only a kernel that loads their block reads."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {
    ITEM: kernel_with(("hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S", "hi = S"))
}
EXPECT = {ITEM: ("non-finite", "no causal block skipping")}

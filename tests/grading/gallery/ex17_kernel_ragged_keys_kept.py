"""ex17: the key columns past S of the last block are not masked (they load as 0: score 0).

Found by the newcomer's try: with ``keep`` left true past S the item said only "184 of 184 values
differ (relative error 1-10 %)"."""

import runpy
from pathlib import Path

_edits = runpy.run_path(str(Path(__file__).with_name("_ex17_kernel.py")))
ITEM, kernel_with = _edits["ITEM"], _edits["kernel_with"]

NOTEBOOK = "ex17"
REPLACE = {ITEM: kernel_with(("keep = (cols < S)[None, :]", "keep = (cols >= 0)[None, :]"))}
EXPECT = {ITEM: ("wrong values", "columns >= S are not masked")}

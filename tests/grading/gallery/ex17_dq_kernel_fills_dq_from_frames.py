"""ex17 (optional dQ kernel): a ``@triton.jit`` dQ kernel whose body is torch autograd, reaching
the launcher's tensors through ``sys._getframe`` (see ``_ex17_frames.py``). It scored 3/3 under
the interpreter; its kernel does not compile as Triton, so it is refused before it runs."""

import runpy
from pathlib import Path

_frames = runpy.run_path(str(Path(__file__).with_name("_ex17_frames.py")))

NOTEBOOK = "ex17"
REPLACE = {"ex17_triton_dq": _frames["torch_kernel"]("getframe", dq=True)}
EXPECT = {"ex17_triton_dq": ("not compiled", "does not compile at line")}

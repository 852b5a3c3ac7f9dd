"""ex17: a `@triton.jit` forward kernel whose body is torch, reaching the grader's tensors by
``gc`` (see ``_ex17_frames.py``). It scored 5/5 under the interpreter; its kernel does not
compile as Triton, so it is refused before it runs."""

import runpy
from pathlib import Path

_frames = runpy.run_path(str(Path(__file__).with_name("_ex17_frames.py")))

NOTEBOOK = "ex17"
REPLACE = {"ex17_triton_forward": _frames["torch_kernel"]("gc")}
EXPECT = {"ex17_triton_forward": ("not compiled", "does not compile at line")}

"""ex17: the frame-walking torch kernel (``_ex17_frames.py``), in a cell whose module-level
statements first patch Triton's compiler to accept anything. It scored 5/5 under the
interpreter; the grader compiles the cell's definitions alone (the patch is not one: it never
runs there), so the kernel is refused."""

import runpy
from pathlib import Path

_frames = runpy.run_path(str(Path(__file__).with_name("_ex17_frames.py")))
_PATCH = """
import triton.compiler.code_generator as _cg

_cg.CodeGenerator.visit_Call = lambda self, node: None  # "every call compiles"
_cg.ast_to_ttir = lambda *a, **k: None
"""

NOTEBOOK = "ex17"
REPLACE = {"ex17_triton_forward": _frames["torch_kernel"]("getframe", module_level=_PATCH)}
EXPECT = {"ex17_triton_forward": ("not compiled", "does not compile at line")}

"""How attention is computed fast (chapters 9, 17, 19): tiled attention with the online softmax,
the FlashAttention backward in PyTorch, the Triton forward and dQ kernels, and ring attention
with its runner.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

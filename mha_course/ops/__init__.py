"""Attention as functions (chapters 1, 2, 12, 18): NumPy attention, scaled dot-product attention,
masks, positions, RoPE and FlexAttention's mask functions.

The lowest floor of the course: these import nothing of the course but its input checks, and
everything above (caches, attention modules, kernels, models) is built from them.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

"""Chapter 4: the heads of multi-head attention, cut out of one projection and put back.

``split_heads`` cuts the last dimension of a projection (H heads' features side by side) into
heads and moves the heads before the sequence; ``merge_heads`` undoes it. ``MultiHeadAttention``
(``attention/mha.py``) and multi-head latent attention (``attention/mla.py``) use them.

Dimension letters: B batch, L sequence length, H heads, D head_dim.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_rank, check_tensor, shape_str


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the last dimension into heads and move heads before the sequence.

    The ``transpose`` matters: ``x.view(B, H, L, D)`` would also have the right shape, but it
    would mix different tokens into one head (chapter 4 shows the wrong result).

    Shape:
        x: (B, L, H * D). Returns (B, H, L, D). (Used for keys and values too, with S for L.)
    """
    check_tensor("x", x)
    check_rank("x", x, "(B, L, H * D)", rank=3)
    B, L, HD = x.shape
    if num_heads <= 0 or HD % num_heads != 0:
        raise ValueError(
            f"x: expected shape (B, L, H * D) with a last size divisible by num_heads H = "
            f"{num_heads}, got {shape_str(x)}"
        )
    return _split(x, num_heads)


def _split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """:func:`split_heads` without the checks (for the module, whose projections fix the sizes)."""
    B, L, HD = x.shape
    # (B, L, H*D) -> (B, L, H, D) -> (B, H, L, D)
    return x.view(B, L, num_heads, HD // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`split_heads`: concatenate the heads back into one vector per token.

    Shape:
        x: (B, H, L, D). Returns (B, L, H * D).
    """
    check_tensor("x", x)
    check_rank("x", x, "(B, H, L, D)", rank=4)
    return _merge(x)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """:func:`merge_heads` without the checks (for the module, whose attention fixes the sizes)."""
    B, H, L, D = x.shape
    return x.transpose(1, 2).reshape(B, L, H * D)  # (B, H, L, D) -> (B, L, H, D) -> (B, L, H*D)

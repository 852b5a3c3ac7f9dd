"""Chapter 12: position information for attention, which on its own cannot see order.

* absolute, added to the token embeddings: :func:`sinusoidal_positions` (Vaswani et al., 2017)
  and :class:`LearnedPositionEmbedding` (GPT-2);
* relative, inside attention: ALiBi (:func:`alibi_slopes`, :func:`alibi_bias`, Press et al.,
  2022), a per-head linear penalty on the distance added to the scores; and RoPE
  (:mod:`mha_course.ops.rope`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mha_course._checks import (
    check_base,
    check_nonnegative_int,
    check_positive_int,
    check_tensor,
    shape_str,
)


def _as_positions(positions: int | torch.Tensor, device=None) -> torch.Tensor:
    if isinstance(positions, int) and not isinstance(positions, bool):
        if positions < 0:
            raise ValueError(f"positions: expected a length >= 0 or a tensor, got {positions}")
        return torch.arange(positions, device=device)
    check_tensor("positions", positions)
    if positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(
            f"positions: expected integer or real positions, got dtype {positions.dtype}"
        )
    return positions


def sinusoidal_positions(
    positions: int | torch.Tensor,
    embed_dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal encoding of "Attention Is All You Need", interleaved as in the paper:

    ``PE[p, 2i] = sin(p / base^(2i/E))``, ``PE[p, 2i+1] = cos(p / base^(2i/E))``.

    Each pair is a point on a circle turning at its own speed; a shift by ``k`` positions is
    the same rotation of every pair whatever ``p`` is, which is what makes relative offsets
    linear functions of the encoding. Computed in float64, returned in ``dtype``.

    Args:
        positions: a length T (positions 0..T-1) or a tensor of positions.

    Shape:
        positions: T or (..., T). Returns (T, E) or (..., T, E).
    """
    E = check_positive_int("embed_dim", embed_dim)
    if E % 2:
        raise ValueError(f"embed_dim: expected an even E (sin/cos pairs), got {E}")
    base = check_base("base", base)
    p = _as_positions(positions, device).to(torch.float64)
    inv = base ** (-torch.arange(0, E, 2, dtype=torch.float64, device=p.device) / E)  # (E/2,)
    angles = p[..., None] * inv  # (..., L, 1) * (E/2,) -> (..., L, E/2)
    # (..., L, E/2, 2) -> (..., L, E): sin in even features, cos in odd ones
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).to(dtype)


class LearnedPositionEmbedding(nn.Module):
    """One trained vector per position, added to the token embeddings (GPT-2's ``wpe``).

    It knows only the ``max_len`` positions it was built for, and only the ones training
    reached carry anything learned: a longer input raises ``ValueError``.

    Shape:
        positions: (T,) or (B, T) long, each in [0, max_len). Returns (T, E) or (B, T, E).
    """

    def __init__(self, max_len: int, embed_dim: int, *, device=None, dtype=None) -> None:
        super().__init__()
        self.max_len = check_positive_int("max_len", max_len)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.weight = nn.Parameter(torch.empty(max_len, embed_dim, device=device, dtype=dtype))
        nn.init.normal_(self.weight, std=0.02)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, embed_dim={self.embed_dim}"

    def forward(self, positions: int | torch.Tensor) -> torch.Tensor:
        p = _as_positions(positions, self.weight.device)
        if p.is_floating_point():
            raise ValueError(f"positions: expected integer positions, got dtype {p.dtype}")
        if p.numel() and (int(p.min()) < 0 or int(p.max()) >= self.max_len):
            raise ValueError(
                f"positions: expected values in [0, max_len) = [0, {self.max_len}), got "
                f"min {int(p.min())}, max {int(p.max())}; a learned table has no row for them"
            )
        return self.weight[p]  # (..., T) -> (..., T, E)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: the geometric sequence ``2^(-8/H), 2^(-16/H), ..., 2^(-8)``.

    When H is not a power of two, the paper's recipe: the slopes of the nearest lower power of
    two, then every other slope of the next power of two.

    Shape:
        Returns (H,) float64.
    """
    H = check_positive_int("num_heads", num_heads)

    def powers_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    n = 2 ** math.floor(math.log2(H))
    slopes = powers_of_two(n)
    if n < H:
        slopes += powers_of_two(2 * n)[0::2][: H - n]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    num_heads: int,
    L: int,
    S: int | None = None,
    *,
    offset: int | None = None,
    slopes: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The ALiBi bias added to the attention scores: ``-slope_h * |i - j|``.

    Query ``i`` sits at position ``offset + i`` and key ``j`` at position ``j``. ``offset``
    defaults to ``S - L`` (the queries are the last L of S positions, as when decoding with a
    KV cache of ``S - L`` tokens; 0 when L = S). For causal attention only ``j <= offset + i``
    is kept by the mask, where the bias is ``-slope_h * (offset + i - j)`` as in the paper.
    Pass it as a float ``attn_mask`` (it broadcasts over the batch) or use
    ``MultiHeadAttention(..., alibi=True)``.

    Shape:
        slopes: (H,), default :func:`alibi_slopes`. Returns (H, L, S), S = L by default.
    """
    H = check_positive_int("num_heads", num_heads)
    L = check_nonnegative_int("L", L, "(query length)")
    S = L if S is None else check_nonnegative_int("S", S, "(key length)")
    offset = S - L if offset is None else offset
    check_nonnegative_int("offset", offset, "(the first query's position; default S - L)")
    if slopes is None:
        slopes = alibi_slopes(H)
    check_tensor("slopes", slopes)
    if slopes.shape != (H,) or not slopes.is_floating_point():
        raise ValueError(
            f"slopes: expected a floating-point tensor of shape (H,) = ({H},), got "
            f"{shape_str(slopes)} {slopes.dtype}"
        )
    q_pos = torch.arange(offset, offset + L, dtype=torch.float64, device=device)  # (L,)
    k_pos = torch.arange(S, dtype=torch.float64, device=device)  # (S,)
    distance = (q_pos[:, None] - k_pos[None, :]).abs()  # (L, 1) - (1, S) -> (L, S)
    slopes = slopes.to(device=device, dtype=torch.float64)
    return (-slopes[:, None, None] * distance).to(dtype)  # (H, 1, 1) * (L, S) -> (H, L, S)

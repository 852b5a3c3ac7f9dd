"""Chapter 8: counting work — FLOPs, bytes moved, arithmetic intensity.

Every timing in the course is turned into a rate with these formulas, so they are written once
and tested. Conventions: a multiply-add is 2 FLOPs; softmax and masking are not counted (they
are O(L·S), not O(L·S·D)); bytes are the minimum a kernel must move, read once and written
once — a lower bound, so GB/s computed from them is the *effective* bandwidth.
"""

from __future__ import annotations

from mha_course._checks import check_kv_heads
from mha_course.caches.base import kv_cache_elements


def _positive(**sizes: int) -> None:
    for name, n in sizes.items():
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"{name}: expected a positive integer, got {n!r}")


def attention_flops(B: int, H: int, L: int, S: int, D: int, causal: bool = False) -> int:
    """FLOPs of one attention forward: scores Q Kᵀ (2·L·S·D) plus weights·V (2·L·S·D) per head.

    Total 4·B·H·L·S·D; causal attention skips (about) half of the (L, S) pairs, so it is halved,
    as FlashAttention's papers and torch's benchmarks count it.

    Shape:
        Q: (B, H, L, D); K, V: (B, G, S, D) — G does not change the FLOPs.
    """
    _positive(B=B, H=H, L=L, S=S, D=D)
    flops = 4 * B * H * L * S * D
    return flops // 2 if causal else flops


def projection_flops(B: int, L: int, S: int, E: int, H: int, G: int | None = None) -> int:
    """FLOPs of the four projections of a multi-head attention module (biases not counted).

    W_Q: (B, L, E) @ (E, E); W_K, W_V: (B, S, E) @ (E, G·D); W_O: (B, L, E) @ (E, E),
    with D = E / H and G key/value heads (default H).
    """
    G = H if G is None else G
    _positive(B=B, L=L, S=S, E=E, H=H, G=G)
    if E % H:
        raise ValueError(f"E, H, G: expected H | E (and G | H), got E={E}, H={H}, G={G}")
    check_kv_heads("G", H, G, of="H")
    kv_width = G * (E // H)
    return 2 * B * L * E * E * 2 + 2 * B * S * E * kv_width * 2


def io_bytes(
    B: int, H: int, L: int, S: int, D: int, G: int | None = None, element_size: int = 4
) -> int:
    """Minimum bytes an attention kernel moves: read Q, K, V once and write O once.

    Shape:
        Q, O: (B, H, L, D); K, V: (B, G, S, D).
    """
    G = H if G is None else G
    _positive(B=B, H=H, L=L, S=S, D=D, G=G, element_size=element_size)
    return (2 * B * H * L * D + 2 * B * G * S * D) * element_size


def kv_bytes_per_token(G: int, D: int, element_size: int, num_layers: int = 1) -> int:
    """Bytes of KV cache one token adds (keys and values, G heads of D numbers each): chapter 7's
    formula (:func:`mha_course.caches.base.kv_cache_elements`) at ``element_size`` bytes per number.

    A decode step over a context of S tokens must read S times this much per sequence.
    """
    _positive(G=G, D=D, element_size=element_size, num_layers=num_layers)
    return kv_cache_elements(num_layers, G, D) * element_size


def decode_step_bytes(B: int, H: int, G: int, S: int, D: int, element_size: int) -> int:
    """Bytes one decode step of one layer reads and writes: the whole cache (B, G, S, D) twice,
    plus one query and one output row per head — dominated by the cache, hence bandwidth-bound."""
    return B * S * kv_bytes_per_token(G, D, element_size) + 2 * B * H * D * element_size


def scores_bytes(B: int, H: int, L: int, S: int, element_size: int) -> int:
    """Memory of the materialised scores (or weights) (B, H, L, S) — what eager attention
    allocates and FlashAttention never does."""
    _positive(B=B, H=H, L=L, S=S, element_size=element_size)
    return B * H * L * S * element_size


def arithmetic_intensity(flops: int | float, nbytes: int | float) -> float:
    """FLOPs per byte moved. Above the device's ridge point (peak FLOP/s ÷ peak bytes/s) a kernel
    can be compute-bound; below it, it is bandwidth-bound."""
    if nbytes <= 0:
        raise ValueError(f"nbytes: expected a positive number of bytes, got {nbytes!r}")
    return float(flops) / float(nbytes)

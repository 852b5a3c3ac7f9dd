"""Attention that reads a cache one key/value head at a time (chapter 16's fast decode paths).

A quantized or paged cache does not hold its keys/values as one dense (B, G, S, D) tensor. Making
one first — dequantize every code, gather every block, then call attention — writes and reads the
whole cache once more than attention itself needs, and allocates it afresh each step: that is what
made the int8 and paged decode steps of ``benchmarks/kv_cache_decode.py`` an order of magnitude
slower than the dense cache. Here ``load(b, g)`` produces the keys/values of ONE sequence ``b`` and
key/value head ``g`` — (S_b, D), a few MiB that stay in the CPU's cache while they are used — and
the H / G query heads of that group attend to them at once (their rows stacked, as in GQA).
Same numbers as attention over the whole dense cache, to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

Values = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]
Loader = Callable[[int, int], tuple]


def attention_by_head(
    query: torch.Tensor, load: Loader, *, num_kv_heads: int, scale: float | None = None
) -> torch.Tensor:
    """Causal attention of the last L tokens of each sequence to its cached keys, one key/value
    head at a time: query ``l`` of sequence ``b`` sits at position ``S_b - L + l`` and sees keys
    ``j <= S_b - L + l`` (with L = 1, a decode step, every key).

    Args:
        load: ``load(b, g)`` -> key (S_b, D), value (S_b, Dv) of sequence b, key/value head g
            (the value may instead be a function ``weights (S_b, rL) -> (rL, Dv)`` that forms the
            weighted sums of values it reads in place, as the paged cache's does);
            or, for a quantized cache, the codes as floats and their per-token scales: key codes,
            value codes, key scale (S_b, 1), value scale (S_b, 1). A key scale multiplies that
            key's scores (``q · (s c) = s (q · c)``), a value scale that value's weight, so the
            codes are never multiplied out.
        num_kv_heads: G; query head ``h`` reads key/value head ``h // (H / G)``.
        scale: default ``1 / sqrt(D)``.

    Shape:
        query: (B, H, L, D). Returns (B, H, L, Dv).
    """
    B, H, L, D = query.shape
    G = num_kv_heads
    r = H // G
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q = (query * scale).reshape(
        B, G, r * L, D
    )  # (B, H, L, D) -> (B, G, H/G * L, D): a group's rows
    outs = []
    for b in range(B):
        for g in range(G):
            k, v, *scales = load(b, g)  # (S_b, D), (S_b, Dv) [, (S_b, 1), (S_b, 1)]
            S = k.shape[0]
            scores = k @ q[b, g].transpose(
                0, 1
            )  # (S, D) @ (D, rL) -> (S, rL): rows of k read in order
            if scales:
                scores.mul_(scales[0])  # (S, rL) * (S, 1): each key's scale
            if L > 1:  # the last L positions are the queries: mask the keys after each one
                p = torch.arange(S - L, S, device=k.device).repeat(r)  # (rL,) each row's position
                scores = scores.masked_fill(
                    torch.arange(S, device=k.device)[:, None] > p[None, :], float("-inf")
                )
            weights = torch.softmax(scores, dim=0)  # over the S keys, per query row
            if scales:
                weights.mul_(scales[1])  # (S, rL) * (S, 1): each value's scale
            if callable(v):  # the loader sums its values where they lie
                outs.append(v(weights))  # (S, rL) -> (rL, Dv)
            else:
                outs.append(weights.transpose(0, 1) @ v)  # (rL, S) @ (S, Dv) -> (rL, Dv)
    out = torch.stack(outs).view(B, G, r * L, -1)  # B*G x (rL, Dv) -> (B, G, H/G * L, Dv)
    return out.reshape(B, H, L, -1)  # -> (B, H, L, Dv)

"""Attention that reads a cache a slice of (sequence, key/value head) pairs at a time (chapter 16's
fast decode paths).

A quantized or paged cache does not hold its keys/values as one dense (B, G, S, D) tensor of floats.
Making one first — dequantize every code, gather every block, then call attention — writes and reads
the whole cache once more than attention needs. Here the B·G (sequence, key/value head) pairs are
read a slice at a time: ``load(i, j)`` makes the floats of pairs ``i .. j - 1`` in one vectorised
step (one dequantize, one gather by one index), and the H / G query heads of every pair of the
slice attend to them in one batched matmul (their rows stacked, as in GQA). How many pairs a slice
holds is :func:`pairs_per_slice`'s choice: on a CPU as many as fit a few MiB, which stay in the
core's cache while they are used; on a GPU all of them, one launch per step — the first GPU run
read one pair per Python iteration and was 11-245x dense MHA's time (``benchmarks/README.md``).
Same numbers as attention over the whole dense cache, to rounding (with the two products as
given; :mod:`mha_course.caches.int8_products` passes its own, which read int8 codes as stored).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

Loader = Callable[[int, int], tuple[torch.Tensor, ...]]
SLICE_BYTES = 2**20  # a CPU slice's keys + values: one core's L2 on the course's EPYC


def pairs_per_slice(num_pairs: int, bytes_per_pair: int, device: torch.device) -> int:
    """Pairs read at once: all of them off the CPU; on a CPU as many as ``SLICE_BYTES`` holds
    (at least one)."""
    if device.type != "cpu":
        return num_pairs
    return max(1, min(num_pairs, SLICE_BYTES // max(1, bytes_per_pair)))


def attention_by_head(
    query: torch.Tensor,
    load: Loader,
    *,
    num_kv_heads: int,
    lengths: Sequence[int] | None = None,
    scale: float | None = None,
    slice_pairs: int | None = None,
    key_scores: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    weighted_values: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Causal attention of the last L tokens of each sequence to its cached keys: query ``l`` of
    sequence ``b`` sits at position ``S_b - L + l`` and sees keys ``j <= S_b - L + l`` (with
    L = 1, a decode step, every key of b).

    Args:
        load: ``load(i, j)`` -> keys (j - i, S, D), values (j - i, S, Dv) of the pairs
            ``i .. j - 1``, pair ``p`` being sequence ``p // G``, key/value head ``p % G``; S is at
            least each of their sequences' lengths (a shorter sequence padded: masked here).
            A quantized cache returns its codes as floats and their per-token scales as well:
            key codes, value codes, key scale (j - i, S, 1), value scale (j - i, S, 1). A key
            scale multiplies that key's scores (``q · (s c) = s (q · c)``), a value scale that
            value's weight: S products per query row, not S · D to scale the codes.
        num_kv_heads: G; query head ``h`` reads key/value head ``h // (H / G)``.
        lengths: S_b per sequence (None: every sequence holds the S tokens ``load`` returns).
        scale: default ``1 / sqrt(D)``.
        slice_pairs: pairs per ``load`` call (None: all B·G in one).
        key_scores: called once per slice, ``key_scores(q_rows, keys)`` with the slice's query
            rows (n, H/G·L, D), already multiplied by ``scale``, and the keys ``load`` returned
            (n, S, D), whatever their dtype; returns NEW scores (n, H/G·L, S) in the query's
            dtype (scaled and masked in place after). None: ``q_rows @ keysᵀ``.
        weighted_values: called once per slice, ``weighted_values(weights, values)`` with the
            softmax weights (n, H/G·L, S), already multiplied by the value scales if ``load``
            returned them, and the values ``load`` returned (n, S, Dv); returns (n, H/G·L, Dv)
            in the query's dtype. None: ``weights @ values``.

    Shape:
        query: (B, H, L, D). Returns (B, H, L, Dv).
    """
    B, H, L, D = query.shape
    G = num_kv_heads
    r, P = H // G, B * G
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q = (query * scale).reshape(P, r * L, D)  # (B, H, L, D) -> (B·G, H/G·L, D): a pair's query rows
    step = slice_pairs or P
    dev = query.device
    # the position of each pair's query rows (H/G heads x L tokens), masking later keys and padding
    ends = torch.tensor(lengths, device=dev).repeat_interleave(G) if lengths else None  # (B·G,)
    rows = torch.arange(L, device=dev).repeat(r)  # (H/G·L,): row l of each head is token l
    pos = None if ends is None else ends[:, None] - L + rows  # (B·G, H/G·L) each row's position
    outs = []
    for i in range(0, P, step):
        j = min(i + step, P)
        k, v, *scales = load(i, j)  # (n, S, D), (n, S, Dv) [, (n, S, 1), (n, S, 1)]
        S = k.shape[1]
        if key_scores is None:
            # torch.bmm, not @: matmul's broadcasting steps cost ~4 us a call in a profile (with
            # the mask skipped: 1.55 -> 1.48x dense at S = 2048, one pair a slice, on a CPU)
            scores = torch.bmm(q[i:j], k.transpose(1, 2))  # (n, rL, D) @ (n, D, S) -> (n, rL, S)
        else:
            scores = key_scores(q[i:j], k)  # (n, rL, D), (n, S, D) -> (n, rL, S)
        if scales:
            scores.mul_(scales[0].transpose(1, 2))  # (n, rL, S) * (n, 1, S): each key's scale
        # mask the keys after each row's position, and padding; a decode step (L = 1) whose
        # sequences all hold S tokens sees every key: no mask (timed alone, the mask's three ops
        # were ~6 % of a CPU step at S = 8192; end to end within the noise)
        if L > 1 or (lengths and min(lengths[i // G : (j - 1) // G + 1]) < S):
            p = (S - L + rows)[None] if pos is None else pos[i:j]  # (1 or n, rL)
            # (1, 1, S) > (., rL, 1) -> (., rL, S); written (S,) > ..., torch took 10x longer
            later = torch.arange(S, device=dev)[None, None, :] > p[:, :, None]
            scores = scores.masked_fill(later, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # over the S keys, per query row
        if scales:
            weights.mul_(scales[1].transpose(1, 2))  # (n, rL, S) * (n, 1, S): each value's scale
        if weighted_values is None:
            outs.append(torch.bmm(weights, v))  # (n, rL, S) @ (n, S, Dv) -> (n, rL, Dv)
        else:
            outs.append(weighted_values(weights, v))  # (n, rL, S), (n, S, Dv) -> (n, rL, Dv)
    out = torch.cat(outs)  # (B·G, H/G·L, Dv)
    return out.reshape(B, H, L, -1)  # (B·G, H/G·L, Dv) -> (B, G, H/G, L, Dv) -> (B, H, L, Dv)

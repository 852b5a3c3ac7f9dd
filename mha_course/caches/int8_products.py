"""Chapter 16, beside the lesson: an int8 cache read with both products taken from its codes.

:meth:`mha_course.QuantizedKVCache.attend` turns each slice's codes into floats and multiplies
floats. On a CPU the turning costs about as much as the products: on the course's 2-core Xeon
(torch 2.13, one thread, the data in cache), turning the (8192, 64) codes of one (sequence, head)
pair into floats took 98 us and the matrix-vector product with them 90 us, while
``torch._int_mm`` (int8 x int8 -> int32, the codes read as stored) took 16 us. For that the float
side must be int8 too (:func:`attend_in_int8`):

- **scores**: each query row rounded to int8 with its own scale (chapter 16's :func:`quantize`,
  one scale per row), as SageAttention computes QKᵀ in int8 (Zhang et al., 2024: a scale per
  block of queries, and the keys' mean subtracted first; here a scale per row, no mean
  subtracted). The query's rounding stays in the result: the scores are those of the rounded
  query;
- **weighted values**: the weights (times the values' scales) in ``LEVELS`` int8 levels,
  ``w ≈ s·(a + b / STEP_RATIO + c / STEP_RATIO²)``, ``STEP_RATIO = 254``: one product of the
  stacked rows ``[a; b; c]``. In exact arithmetic each weight is at most ``max|w| / 16,387,064``
  off, ``max|w|`` its row's largest (half a step of the last level; float32's rounding of that
  largest weight is ``max|w| / 16,777,216``, and in float32 the levels' own rounding adds to it:
  up to 1.8x the bound: 1.76x at worst over 200 rows of (8, 4, 2048) softmax weights times
  random value scales). Precision is relative to the row's largest weight:
  next to one token whose weight times its value scale dominates, the others lose theirs. Two
  levels, ``max|w| / 64,516``, failed the benchmark's float32 check at S = 8192 and 2048.

int32 sums are exact while a sum holds at most ``INT32_SAFE_TERMS`` products of two int8 codes
(127² each); longer sums are taken in chunks and added in float64.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_tensor
from mha_course.caches.per_head import attention_by_head, pairs_per_slice
from mha_course.caches.quantized import QuantizedKVCache, quantize

INT32_SAFE_TERMS = (2**31 - 1) // 127**2  # 133,144 products of |code| <= 127 fit an int32
LEVELS = 3  # int8 levels of the weights
STEP_RATIO = 254  # a level's step / the next one's: half a step is 127 of the next level's


def rows_to_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row (last dimension) rounded to int8 codes with its own scale: ``x ≈ codes · scale``
    (:func:`quantize` per token); a row holding NaN or inf gets a NaN scale, so what it
    multiplies is not finite either, as in float arithmetic (an int8 code cannot hold NaN).

    Shape:
        x: (n, R, K) float. Returns codes (n, R, K) int8 and scale (n, R, 1).
    """
    codes, scale = quantize(x[None])  # (n, R, K) -> (1, n, R, K): one scale per row
    # quantize gives a NaN row scale 1; 0 · (the row's sum) is 0, or NaN where the row holds NaN
    # or inf (or sums past the dtype's range: such a row's products overflow anyway)
    return codes[0], scale[0] + 0.0 * x.sum(dim=-1, keepdim=True)  # (n, R, 1)


def _int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` of int8 matrices, exact: int32 sums of at most INT32_SAFE_TERMS terms, added in
    float64 beyond that.

    Shape:
        a: (R, K) int8; b: (K, N) int8. Returns (R, N), int32 or float64 for K > INT32_SAFE_TERMS.
    """
    K = a.shape[1]
    if K <= INT32_SAFE_TERMS:
        return torch._int_mm(a, b)
    parts = range(0, K, INT32_SAFE_TERMS)
    return sum(
        torch._int_mm(a[:, k : k + INT32_SAFE_TERMS], b[k : k + INT32_SAFE_TERMS]).double()
        for k in parts
    )


def _int_mm_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a[p] @ b[p]`` for every pair p, exact (:func:`_int_mm`): torch has no batched int8
    product on a CPU, so one product a pair, each written into its slice of one output (no
    stacking copy) while the sums fit an int32.

    Shape:
        a: (n, R, K) int8; b: (n, K, N) int8. Returns (n, R, N), int32 (float64 past
        INT32_SAFE_TERMS terms).
    """
    if a.shape[0] != b.shape[0]:  # zip would stop at the shorter, leaving output unwritten
        raise ValueError(
            f"expected as many (sequence, head) pairs in both operands, got {a.shape[0]} "
            f"(the rows) and {b.shape[0]} (the codes)"
        )
    if a.shape[2] > INT32_SAFE_TERMS:
        if not len(a):
            return a.new_empty(0, a.shape[1], b.shape[2], dtype=torch.float64)
        return torch.stack([_int_mm(a_p, b_p) for a_p, b_p in zip(a, b)])
    out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=torch.int32, device=a.device)
    for a_p, b_p, out_p in zip(a, b, out):
        torch._int_mm(a_p, b_p, out=out_p)
    return out


def int8_scores(q_rows: torch.Tensor, key_codes: torch.Tensor) -> torch.Tensor:
    """The scores of float query rows against int8 key codes, in int8: ``round(q) @ codesᵀ``.

    Shape:
        q_rows: (n, R, D) float; key_codes: (n, S, D) int8. Returns (n, R, S) in q_rows' dtype.
    """
    wide = torch.promote_types(q_rows.dtype, torch.float32)  # 16 bits: 127² · D overflows
    a, scale = rows_to_int8(q_rows.to(wide))  # (n, R, D) int8, (n, R, 1)
    scores = _int_mm_pairs(a, key_codes.transpose(1, 2))  # (R, D) @ (D, S) per pair -> (n, R, S)
    return scores.to(wide).mul_(scale).to(q_rows.dtype)  # (n, R, S) * (n, R, 1)


def int8_weighted_values(weights: torch.Tensor, value_codes: torch.Tensor) -> torch.Tensor:
    """``weights @ value_codes`` in int8: the weights in LEVELS levels, ``s·(a + b / 254 + ...)``.

    Shape:
        weights: (n, R, S) float; value_codes: (n, S, Dv) int8. Returns (n, R, Dv).
    """
    dtype, wide = weights.dtype, torch.promote_types(weights.dtype, torch.float32)
    weights = weights.to(wide)  # 16 bits: 127² · S overflows, the last level's step underflows
    a, scale = rows_to_int8(weights)  # (n, R, S) int8, (n, R, 1)
    levels, steps = [a], [scale]
    rest = weights - a.to(weights.dtype) * scale  # |rest| <= half a step of the level before
    for _ in range(LEVELS - 1):
        steps.append(steps[-1] / STEP_RATIO)
        levels.append(torch.round(rest / steps[-1]).clamp_(-127, 127).to(torch.int8))
        rest = rest - levels[-1].to(weights.dtype) * steps[-1]
    R = weights.shape[1]
    stacked = torch.cat(levels, dim=1)  # (n, R, S) x LEVELS -> (n, LEVELS·R, S): codes read once
    sums = _int_mm_pairs(stacked, value_codes).to(wide)  # (LEVELS·R, S) @ (S, Dv) per pair
    # -> (n, LEVELS·R, Dv)
    out = sum(sums[:, i * R : (i + 1) * R] * step for i, step in enumerate(steps))  # (n, R, Dv)
    return out.to(dtype)


def attend_in_int8(
    cache: QuantizedKVCache, query: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """:meth:`QuantizedKVCache.attend` with both products taken from the int8 codes as stored
    (an int8 cache, a CPU): the result is attention over the dequantized cache with each query
    row (times ``scale``) rounded to int8, the weights within about float32's rounding of each
    row's largest weight.

    Shape:
        query: (B, H, L, D) with H a multiple of the cache's G. Returns (B, H, L, Dv).
    """
    check_tensor("query", query)
    if not isinstance(cache, QuantizedKVCache) or cache.bits != 8:
        got = f"bits={cache.bits}" if isinstance(cache, QuantizedKVCache) else type(cache).__name__
        raise ValueError(f"cache: expected a QuantizedKVCache(8) (int8 codes), got {got}")
    if query.device.type != "cpu":
        raise ValueError(
            f"query: expected a CPU tensor (torch._int_mm is taken on a CPU here), got one on "
            f"{query.device.type}"
        )
    G, S, codes, scales = cache.pairs(query)
    # the floats a slice makes per pair: its weights, LEVELS rows per query row (the codes are
    # read as stored: S·(D + Dv) bytes a pair besides), and so how many pairs a slice holds
    rows = LEVELS * query.shape[1] // G * query.shape[2]
    step = pairs_per_slice(len(codes[0]), S * rows * query.element_size(), query.device)

    def load(i: int, j: int) -> tuple[torch.Tensor, ...]:
        """Pairs i..j-1: key codes (n, S, D), value codes (n, S, Dv), scales (n, S, 1) twice."""
        return codes[0][i:j], codes[1][i:j], scales[0][i:j], scales[1][i:j]

    return attention_by_head(
        query,
        load,
        num_kv_heads=G,
        scale=scale,
        slice_pairs=step,
        key_scores=int8_scores,
        weighted_values=int8_weighted_values,
    )

"""Exercise 17's Triton forward kernel item: its cases, its float64 oracle, its known-wrong
kernels simulated block by block, and the driver that launches the learner's kernel.

The learner writes ``flash_fwd_kernel`` with the signature of the course's own forward kernel
(:mod:`mha_course.kernels.triton_flash`); the driver launches it with :func:`~mha_course.kernels.triton_flash.
launch_forward`, as the exercise's self-check does. The reference is the dense float64 softmax
(and log-sum-exp) with top-left causal alignment, independent of the blocks. The mistakes are
the FlashAttention-2 loop (:func:`blockwise`) with one step done wrong: they depend on the
blocks, so the cases carry ``block_q``/``block_k``, ragged L and S, causal with L != S and GQA.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.attention.gqa import kv_group_of_query_heads
from mha_course.ops.masks import causal_mask

NO_RESCALE = (
    "the accumulator is not rescaled when the running max grows: acc = alpha * acc + "
    "P V, with alpha = exp(m_old - m_new), or the earlier blocks keep their old scale"
)
SUM_NO_RESCALE = (
    "the row sum is not rescaled when the running max grows: "
    "row_sum = alpha * row_sum + rowsum(P), like the accumulator"
)
LSE_NO_MAX = (
    "lse = log(row_sum) without the running max: row_sum was summed from exp(s - m), "
    "so lse = m + log(row_sum)"
)
CAUSAL_NO_MASK = (
    "causal blocks skipped but no mask inside the diagonal block: a query row still "
    "sees the later keys of its own block (mask with cols <= rows)"
)
CAUSAL_BOTTOM_RIGHT = (
    "causal mask aligned bottom-right (j <= i + S - L): the course, like SDPA's "
    "is_causal, aligns it top-left, query i sees keys j <= i whatever L and S"
)
NOT_CAUSAL = "IS_CAUSAL ignored: the causal case attended to every key"
SKIP_DIAGONAL = (
    "the diagonal block is skipped: a causal query block must also visit the key "
    "block(s) holding its own rows (loop up to min(S, start_m + BLOCK_M))"
)
SKIP_BY_BLOCK_N = (
    "the causal loop stops at start_m + BLOCK_N: the query block's last row is "
    "start_m + BLOCK_M - 1, so loop up to min(S, start_m + BLOCK_M)"
)
SKIP_NOT_CAUSAL = (
    "key blocks skipped without IS_CAUSAL: only a causal kernel may stop at the "
    "query block; a non-causal one visits all S keys"
)
RAGGED_KEYS = (
    "the last key block's columns >= S are not masked: they load as 0 (other=0.0), so "
    "each gets score 0 and a weight exp(0 - m) in every row, as if it were a key"
)
KV_NO_BATCH = (
    "every batch read the key/value heads of batch 0: the kv index is "
    "b * G + h // (H // G), with b = bh // H"
)
NO_SKIP = (
    "key blocks past the query block were loaded: the causal case's keys that no query "
    "row can see hold NaN here, and the output came back NaN (a masked score gives a "
    "weight 0, but 0 * NaN in P V is NaN)"
)


def kv_per_query_head(
    key: torch.Tensor, value: torch.Tensor, H: int, kv: str = "contiguous"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query head's key/value head in float64: contiguous groups ("contiguous", the course's
    rule), or a mistake's reading: "interleaved" (h % G) or "batch0" (every batch reads batch 0).

    Shape:
        key, value: (B, G, S, D). Returns two (B, H, S, D).
    """
    G = key.shape[1]
    heads = torch.arange(H) % G if kv == "interleaved" else kv_group_of_query_heads(H, G)
    k, v = key.double()[:, heads], value.double()[:, heads]  # (B, G, S, D) -> (B, H, S, D)
    if kv == "batch0":
        k, v = k[:1].expand_as(k), v[:1].expand_as(v)
    return k, v


def unread_from(L: int, S: int, block_q: int, block_k: int) -> int:
    """The first key a causal launch of :func:`~mha_course.kernels.triton_flash.launch_forward` never
    loads when its kernel skips the blocks no row sees: the last program (start_m = (cdiv(L,
    block_q) - 1) * block_q) loops start_n over range(0, hi, block_k) with hi = min(S, start_m +
    block_q), so its loads stop at cdiv(hi, block_k) * block_k; no other program reads further."""
    hi_last = min(S, -(-L // block_q) * block_q)
    return -(-hi_last // block_k) * block_k


def make_cases(rng: np.random.Generator) -> list[dict]:
    """Ragged L and S (never multiples of the block), causal with L < S, L > S and L = S, GQA
    and MQA, block_q above, below and equal to block_k. Tiny, so the interpreter is quick.

    In the last case (causal, L < S by more than a block), the keys and values from
    :func:`unread_from` on are NaN: no query row sees them (row i sees keys j <= i < L) and a
    kernel that skips the blocks past its query block never loads them, so its output is
    unchanged; one that loads every block and only masks gets NaN through P V (:data:`NO_SKIP`)."""

    def case(B, H, G, L, S, D, causal, bq, bk, unseen_nan=False):
        q = rng.normal(size=(B, H, L, D)).astype(np.float32)
        k, v = (rng.normal(size=(B, G, S, D)).astype(np.float32) for _ in range(2))
        if unseen_nan:  # (B, G, S, D): keys/values unread_from.. S - 1 set to NaN
            assert causal and unread_from(L, S, bq, bk) < S
            k[:, :, unread_from(L, S, bq, bk) :] = v[:, :, unread_from(L, S, bq, bk) :] = np.nan
        return {
            "query": q,
            "key": k * 1.5,
            "value": v,
            "is_causal": causal,
            "block_q": bq,
            "block_k": bk,
        }

    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    square = r(18, 30)
    # The NaN case last (and drawn last: the others as before): a kernel with another mistake
    # is named on a finite case first, since one that ignores IS_CAUSAL loads the NaN keys too.
    return [
        case(1, 1, 1, r(17, 23), r(41, 47), 8, False, 16, 16),
        case(1, 4, 2, r(17, 23), r(33, 39), 16, True, 16, 16),
        case(2, 2, 1, r(35, 45), r(19, 25), 8, True, 32, 16),
        case(2, 1, 1, square, square, 8, True, 16, 32),
        case(1, 2, 1, r(17, 23), r(40, 47), 8, True, 16, 16, unseen_nan=True),
    ]  # NaN from 32


def reference(query, key, value, is_causal, block_q, block_k):
    """Dense float64 softmax(Q Kᵀ / sqrt(D)) V and logsumexp, top-left causal (over the keys
    j < L only: those past them are NaN in one case, see :func:`make_cases`).

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D). Returns (B, H, L, D), (B, H, L).
    """
    B, H, L, D = query.shape
    G, S = key.shape[1], key.shape[2]
    if is_causal:  # only the keys a row can see (j <= i < L): the NaN ones past them never count
        S = min(S, L)
        key, value = key[:, :, :S], value[:, :, :S]  # (B, G, S, D) -> (B, G, min(S, L), D)
    heads = kv_group_of_query_heads(H, G)
    k, v = key.double()[:, heads], value.double()[:, heads]  # (B, G, S, D) -> (B, H, S, D)
    s = (query.double() @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, L, S)
    if is_causal:
        s = s.masked_fill(~causal_mask(L, S), float("-inf"))
    out = torch.softmax(s, dim=-1) @ v  # (B, H, L, S) @ (B, H, S, D) -> (B, H, L, D)
    return out.to(query.dtype), torch.logsumexp(s, dim=-1).float()


def blockwise(
    query,
    key,
    value,
    is_causal,
    block_q,
    block_k,
    *,
    rescale_acc=True,
    rescale_sum=True,
    lse_max=True,
    mask="top_left",
    stop="causal",
    kv="contiguous",
    ragged="masked",
):
    """The FlashAttention-2 forward loop in float64, as the kernel runs it (one query block at
    a time, key blocks of ``block_k`` from 0 up to the stop), with one step switchable to a
    known mistake; the defaults give the reference (a test checks it).

    ``mask``: "top_left", "none", "strict" (cols < rows), "bottom_right"; ``stop``: "causal"
    (min(S, start_m + block_q) when causal, else S), "diagonal" (start_m), "block_k" (start_m
    + block_k), "bottom_right" (shifted by S - L), "always" (the causal stop even when not
    causal), "never" (S); ``kv``:
    "contiguous", "interleaved" (h % G), "batch0"; ``ragged``: "masked" (key columns past S
    get -inf) or "zeros" (the last key block runs to a multiple of ``block_k``, its columns past
    S loaded as zero keys and values and not masked).

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D). Returns (B, H, L, D), (B, H, L).
    """
    B, H, L, D = query.shape
    S = key.shape[2]
    k, v = kv_per_query_head(key, value, H, kv)
    width = S
    if ragged == "zeros":  # (B, H, S, D) -> (B, H, S + pad, D), the pad rows zero
        width = -(-S // block_k) * block_k
        k, v = (torch.nn.functional.pad(t, (0, 0, 0, width - S)) for t in (k, v))
    q = query.double()
    out = torch.empty(B, H, L, D, dtype=torch.float64)
    lse = torch.empty(B, H, L, dtype=torch.float64)
    for m0 in range(0, L, block_q):
        rows = torch.arange(m0, min(L, m0 + block_q))
        hi = {
            "causal": min(S, m0 + block_q) if is_causal else S,
            "diagonal": min(S, m0) if is_causal else S,
            "bottom_right": max(0, min(S, m0 + block_q + S - L)) if is_causal else S,
            "block_k": min(S, m0 + block_k) if is_causal else S,
            "always": min(S, m0 + block_q),
            "never": S,
        }[stop]
        m = torch.full((B, H, len(rows)), float("-inf"), dtype=torch.float64)
        row_sum = torch.zeros(B, H, len(rows), dtype=torch.float64)
        acc = torch.zeros(B, H, len(rows), D, dtype=torch.float64)
        for n0 in range(0, hi, block_k):
            cols = torch.arange(n0, min(width, n0 + block_k))
            s = (q[:, :, rows] @ k[:, :, cols].transpose(-2, -1)) / math.sqrt(D)  # (B, H, r, c)
            if is_causal and mask != "none":
                keep = {
                    "top_left": cols[None, :] <= rows[:, None],
                    "strict": cols[None, :] < rows[:, None],
                    "bottom_right": cols[None, :] <= rows[:, None] + S - L,
                }[mask]
                s = s.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new)  # NaN while a row has seen no key, as in the kernel
            p = torch.exp(s - m_new[..., None])
            row_sum = (alpha if rescale_sum else 1.0) * row_sum + p.sum(-1)
            acc = (alpha[..., None] if rescale_acc else 1.0) * acc + p @ v[:, :, cols]
            m = m_new
        out[:, :, rows] = acc / row_sum[..., None]
        lse[:, :, rows] = (m + torch.log(row_sum)) if lse_max else torch.log(row_sum)
    return out.to(query.dtype), lse.float()


def variant(**switches):
    """A mistake's ``variant``: :func:`blockwise` with ``switches`` (same arguments as the item)."""
    return lambda *args: blockwise(*args, **switches)

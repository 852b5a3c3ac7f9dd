"""Exercise 17's optional dQ kernel item: its cases, its float64 oracle (autograd), and its
known-wrong kernels simulated block by block.

The learner writes ``flash_dq_kernel`` with the signature of the course's ``_bwd_dq_kernel``
(:mod:`mha_course.kernels.triton_flash`); the driver launches it with :func:`~mha_course.kernels.triton_dq.
launch_dq`, as the exercise's self-check does, from the forward's saved O and log-sum-exp (the
cases carry them, computed in float64 here and rounded to float32 as the forward kernel returns
them). The reference is dQ of the dense float64 attention by autograd, independent of the
blocks; the mistakes are the dQ loop (:func:`blockwise`) with one step done wrong.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.attention.gqa import kv_group_of_query_heads
from mha_course.grading.oracles import triton_forward as fwd
from mha_course.ops.masks import causal_mask

P_NO_SCALE = (
    "the recomputed P is off: the scores lack the softmax scale, so exp(q k^T - lse) "
    "is not the forward's weights (its scores were scale * q k^T)"
)
DQ_NO_SCALE = (
    "dQ off by the softmax scale: s = scale * Q K^T, so its gradient carries the "
    "factor scale once more (dQ = scale * dS K)"
)
P_NO_LSE = (
    "P recomputed as exp(scores) without the row's log-sum-exp: the weights are "
    "unnormalised, e^lse times too large"
)
NO_D = "dS = P * dP without the row term: the softmax backward is dS = P * (dP - D)"
D_SIGN = "dQ has the wrong sign: dS came out as P * (D - dP), the softmax backward is P * (dP - D)"
NO_CAUSAL_MASK = (
    "causal blocks skipped but no mask inside the diagonal block: rows got gradient "
    "from the later keys of their own block (the forward never let them see those)"
)
NOT_CAUSAL = "IS_CAUSAL ignored: the causal case got gradient from every key"
SKIP_DIAGONAL = (
    "the diagonal block is skipped: a causal query block also reads the key "
    "block(s) holding its own rows (up to min(S, start_m + BLOCK_M))"
)
KV_NO_BATCH = (
    "every batch read the key/value heads of batch 0: the kv index is "
    "b * G + h // (H // G), with b = bh // H"
)
UNDEFINED_LANES = (
    "NaN in dQ: a masked tl.load without other= left its masked-off lanes "
    "undefined (NaN here; garbage on a GPU), and they reached the sums: the ragged "
    "tail rows/keys or the head columns D..BLOCK_D of q, k, v, dO, lse or D"
)


def make_cases(rng: np.random.Generator) -> list[dict]:
    """Ragged L and S, causal with L < S, L > S and L = S, GQA and MQA, D < BLOCK_D, block_q
    above, below and equal to block_k; with the forward's O and lse (float32) and a dO.
    Tiny, so the interpreter is quick."""

    def case(B, H, G, L, S, D, causal, bq, bk):
        q = rng.normal(size=(B, H, L, D)).astype(np.float32)
        k = (rng.normal(size=(B, G, S, D)) * 1.5).astype(np.float32)
        v = rng.normal(size=(B, G, S, D)).astype(np.float32)
        d_out = rng.normal(size=(B, H, L, D)).astype(np.float32)
        out, lse = fwd.reference(*map(torch.from_numpy, (q, k, v)), causal, bq, bk)
        return {
            "query": q,
            "key": k,
            "value": v,
            "out": out.numpy(),
            "lse": lse.numpy(),
            "d_out": d_out,
            "is_causal": causal,
            "block_q": bq,
            "block_k": bk,
        }

    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    square = r(18, 30)
    return [
        case(1, 2, 1, r(17, 23), r(33, 39), 8, False, 16, 16),
        case(1, 4, 2, r(17, 23), r(33, 39), 16, True, 16, 16),
        case(2, 2, 1, r(35, 45), r(19, 25), 8, True, 32, 16),
        case(1, 2, 2, square, square, 8, True, 16, 32),
    ]


def reference(query, key, value, out, lse, d_out, is_causal, block_q, block_k):
    """dQ of the dense float64 attention (top-left causal, GQA), by autograd.

    Shape:
        query, out, d_out: (B, H, L, D); key, value: (B, G, S, D); lse: (B, H, L).
        Returns dQ (B, H, L, D) in query's dtype.
    """
    B, H, L, D = query.shape
    G, S = key.shape[1], key.shape[2]
    heads = kv_group_of_query_heads(H, G)
    k, v = key.double()[:, heads], value.double()[:, heads]  # (B, G, S, D) -> (B, H, S, D)
    with torch.enable_grad():
        q = query.double().requires_grad_()
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, L, S)
        if is_causal:
            s = s.masked_fill(~causal_mask(L, S), float("-inf"))
        o = torch.softmax(s, dim=-1) @ v  # (B, H, L, S) @ (B, H, S, D) -> (B, H, L, D)
        (dq,) = torch.autograd.grad(o, q, d_out.double())
    return dq.to(query.dtype)


def blockwise(
    query,
    key,
    value,
    out,
    lse,
    d_out,
    is_causal,
    block_q,
    block_k,
    *,
    scale_p=True,
    scale_dq=True,
    use_lse=True,
    d_term="minus",
    mask="top_left",
    stop="causal",
    kv="contiguous",
):
    """The dQ kernel's loop in float64 (one query block at a time, key blocks of ``block_k`` up
    to the stop, P recomputed from the saved lse, D = rowsum(dO ∘ O)), with one step
    switchable to a known mistake; the defaults give the reference (a test checks it).

    ``d_term``: "minus" (dP - D), "none" (dP), "reversed" (D - dP); ``mask``: "top_left",
    "none", "strict" (cols < rows); ``stop``: "causal", "diagonal" (start_m), "never" (S);
    ``kv``: "contiguous", "interleaved" (h % G), "batch0".

    Shape:
        query, out, d_out: (B, H, L, D); key, value: (B, G, S, D); lse: (B, H, L).
        Returns dQ (B, H, L, D).
    """
    B, H, L, D = query.shape
    S = key.shape[2]
    k, v = fwd.kv_per_query_head(key, value, H, kv)
    q, do, lse64 = query.double(), d_out.double(), lse.double()
    delta = (do * out.double()).sum(-1)  # (B, H, L, D) -> (B, H, L)
    scale = 1.0 / math.sqrt(D)
    dq = torch.zeros(B, H, L, D, dtype=torch.float64)
    for m0 in range(0, L, block_q):
        rows = torch.arange(m0, min(L, m0 + block_q))
        hi = {
            "causal": min(S, m0 + block_q) if is_causal else S,
            "diagonal": min(S, m0) if is_causal else S,
            "never": S,
        }[stop]
        for n0 in range(0, hi, block_k):
            cols = torch.arange(n0, min(S, n0 + block_k))
            kc, vc = k[:, :, cols], v[:, :, cols]
            s = (q[:, :, rows] @ kc.transpose(-2, -1)) * (scale if scale_p else 1.0)  # (B, H, r, c)
            p = torch.exp(s - lse64[:, :, rows, None]) if use_lse else torch.exp(s)
            if is_causal and mask != "none":
                keep = (
                    (cols[None, :] <= rows[:, None])
                    if mask == "top_left"
                    else (cols[None, :] < rows[:, None])
                )
                p = p.masked_fill(~keep, 0.0)
            dp = do[:, :, rows] @ vc.transpose(-2, -1)  # (B, H, r, D) @ (B, H, D, c)
            dd = delta[:, :, rows, None]
            ds = {"minus": p * (dp - dd), "none": p * dp, "reversed": p * (dd - dp)}[d_term]
            dq[:, :, rows] += ds @ kc  # (B, H, r, c) @ (B, H, c, D) -> (B, H, r, D)
    return (dq * (scale if scale_dq else 1.0)).to(query.dtype)


def variant(**switches):
    """A mistake's ``variant``: :func:`blockwise` with ``switches`` (same arguments as the item)."""
    return lambda *args: blockwise(*args, **switches)


def has_nan(output: np.ndarray, case: dict) -> bool:
    """A mistake's ``matches``: the kernel's dQ holds NaN (the reference never does)."""
    return bool(np.isnan(np.asarray(output, dtype=np.float64)).any())

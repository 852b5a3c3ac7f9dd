"""Chapter 17: the FlashAttention backward pass, in PyTorch, on chapter 9's tiles.

The forward pass (:func:`mha_course.tiled_attention`) never holds the (L, S) weights. Autograd
through it would keep every tile anyway; a FlashAttention backward keeps only the output ``O`` and
one number per query row, the log-sum-exp ``lse`` of that row's scores, and recomputes the weights
tile by tile::

    P_ij  = exp(scale · q_i k_jᵀ - lse_i)          (the softmax weights, exactly)
    dV_j += P_ijᵀ dO_i
    dP_ij = dO_i V_jᵀ
    dS_ij = P_ij ∘ (dP_ij - D_i)                  with D_i = rowsum(dO_i ∘ O_i)
    dQ_i += scale · dS_ij K_j,   dK_j += scale · dS_ijᵀ Q_i

``D`` replaces rowsum(P ∘ dP) — the softmax backward's row term — which would need a whole row of
P before any dS could be formed; ``rowsum(P ∘ (dO Vᵀ)) = rowsum(dO ∘ (P V)) = rowsum(dO ∘ O)``.
"""

from __future__ import annotations

import math

import torch

from mha_course._checks import check_rank, check_shape, check_tensor
from mha_course.kernels.tiled import _check_inputs, tiled_attention


def backward_d_term(out: torch.Tensor, d_out: torch.Tensor) -> torch.Tensor:
    """``D = rowsum(dO ∘ O)``: the softmax backward's row term, from the output alone.

    Shape:
        out, d_out: (..., L, Dv). Returns (..., L).
    """
    check_tensor("out", out)
    check_rank("out", out, "(..., L, Dv)", min_rank=2)
    check_shape("d_out", d_out, tuple(out.shape), "(..., L, Dv) as out")
    return (d_out * out).sum(dim=-1)  # (..., L, Dv) -> (..., L)


def _check_saved(query, value, out, lse, d_out) -> None:
    """What the forward saved and the output gradient must fit the inputs: out, d_out
    (..., L, Dv) and lse (..., L) — a wrong lse would silently give wrong gradients."""
    lead, L, Dv = tuple(query.shape[:-2]), query.shape[-2], value.shape[-1]
    check_shape("out", out, (*lead, L, Dv), "(..., L, Dv)")
    check_shape("lse", lse, (*lead, L), "(..., L)")
    check_shape("d_out", d_out, (*lead, L, Dv), "(..., L, Dv)")


def _tile_weights(q, k, lse_rows, scale, is_causal, i0, j0):
    """P for one tile, recomputed from the saved log-sum-exp (0 where masked)."""
    scores = scale * (q @ k.transpose(-2, -1))  # (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
    if is_causal:
        rows = torch.arange(i0, i0 + q.shape[-2], device=q.device).unsqueeze(-1)  # (Bq, 1)
        cols = torch.arange(j0, j0 + k.shape[-2], device=q.device)  # (Bk,)
        scores = scores.masked_fill(cols > rows, float("-inf"))
    # A fully masked row has lse = -inf; +inf there makes exp(-inf - inf) = 0, not NaN.
    lse_safe = torch.where(torch.isfinite(lse_rows), lse_rows, torch.full_like(lse_rows, math.inf))
    return torch.exp(scores - lse_safe.unsqueeze(-1))  # (..., Bq) -> (..., Bq, 1)


def flash_attention_backward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    d_out: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of softmax(Q Kᵀ · scale) V from ``O``, ``lse`` and ``dO``, tile by tile.

    Outer loop over key/value blocks (each ``dK_j``, ``dV_j`` is finished in one pass, as in
    FlashAttention-2), inner loop over query blocks accumulating ``dQ``. With ``is_causal``
    (top-left aligned) the query blocks wholly above the diagonal are skipped. The largest
    intermediate is one (block_q, block_k) tile.

    Shape:
        query: (..., L, D); key: (..., S, D); value: (..., S, Dv); out, d_out: (..., L, Dv);
        lse: (..., L). Returns (dQ (..., L, D), dK (..., S, D), dV (..., S, Dv)).
    """
    _check_inputs(query, key, value, block_q, block_k)
    _check_saved(query, value, out, lse, d_out)
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    d_term = backward_d_term(out, d_out)  # (..., L)
    dq, dk, dv = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
    for j0 in range(0, S, block_k):
        j1 = min(j0 + block_k, S)
        k, v = key[..., j0:j1, :], value[..., j0:j1, :]  # (..., Bk, D), (..., Bk, Dv)
        first = (j0 // block_q) * block_q if is_causal else 0  # causal: rows i < j0 see no key here
        for i0 in range(first, L, block_q):
            i1 = min(i0 + block_q, L)
            q, do = query[..., i0:i1, :], d_out[..., i0:i1, :]
            p = _tile_weights(q, k, lse[..., i0:i1], scale, is_causal, i0, j0)  # (..., Bq, Bk)
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do  # (..., Bk, Bq) @ (..., Bq, Dv)
            dp = do @ v.transpose(-2, -1)  # (..., Bq, Dv) @ (..., Dv, Bk) -> (..., Bq, Bk)
            ds = p * (dp - d_term[..., i0:i1].unsqueeze(-1))  # (..., Bq) -> (..., Bq, 1)
            dq[..., i0:i1, :] += scale * (ds @ k)  # (..., Bq, Bk) @ (..., Bk, D)
            dk[..., j0:j1, :] += scale * (ds.transpose(-2, -1) @ q)  # (..., Bk, Bq) @ (..., Bq, D)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Chapter 9's tiled forward, saving only (Q, K, V, O, lse); the tiled backward above."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, block_q, block_k):
        with torch.no_grad():
            out, lse = tiled_attention(
                query,
                key,
                value,
                is_causal=is_causal,
                scale=scale,
                block_q=block_q,
                block_k=block_k,
                return_lse=True,
            )
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.args = (is_causal, scale, block_q, block_k)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        query, key, value, out, lse = ctx.saved_tensors
        is_causal, scale, block_q, block_k = ctx.args
        dq, dk, dv = flash_attention_backward(
            query, key, value, out, lse, d_out.contiguous(), is_causal, scale, block_q, block_k
        )
        return dq, dk, dv, None, None, None, None


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Attention whose backward recomputes the weights from the log-sum-exp (FlashAttention).

    Same values as :func:`mha_course.tiled_attention`; ``.backward()`` goes through
    :func:`flash_attention_backward`, so the memory kept for the backward is O(L), not O(L·S).

    Shape:
        query: (..., L, D); key: (..., S, D); value: (..., S, Dv). Returns (..., L, Dv).
    """
    _check_inputs(query, key, value, block_q, block_k)
    return FlashAttentionFunction.apply(query, key, value, is_causal, scale, block_q, block_k)

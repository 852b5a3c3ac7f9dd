"""Chapter 9: FlashAttention from scratch — the online softmax and blockwise (tiled) attention.

The naive path (:func:`mha_course.scaled_dot_product_attention`) materialises an (L, S) matrix
of scores. Here the keys/values are visited one block at a time and a running maximum ``m``, a
running sum ``row_sum`` and an unnormalised output ``acc`` are rescaled as each block arrives (the
*online softmax*). The largest intermediate is one (block_q, block_k) tile, so memory grows
linearly with the sequence length instead of quadratically. Same result, to rounding.
"""

from __future__ import annotations

import math

import torch

from mha_course._checks import check_positive_int, check_qkv, check_rank, shape_str


def online_softmax_update(
    m: torch.Tensor,
    row_sum: torch.Tensor,  # the running sum (ℓ in the FlashAttention paper)
    acc: torch.Tensor,
    scores: torch.Tensor,
    value: torch.Tensor,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the online softmax: fold a new block of scores (and its values) into the
    running maximum ``m``, running sum ``row_sum`` and unnormalised output ``acc``.

    With ``m_new = max(m, rowmax(scores))`` the old terms were exponentiated relative to
    ``m``, so they are rescaled by ``alpha = exp(m - m_new)``::

        p           = exp(scores - m_new)
        row_sum_new = alpha * row_sum + rowsum(p)
        acc_new     = alpha * acc + p @ value

    After the last block, ``acc / row_sum`` is softmax(all scores) @ values. Start from
    ``m = -inf, row_sum = 0, acc = 0``. Masked scores are ``-inf``; a row that has seen only
    ``-inf`` so far keeps ``m = -inf, row_sum = 0, acc = 0`` (no NaN).

    ``inplace=True`` overwrites ``scores``, ``row_sum`` and ``acc`` instead of allocating new
    tensors (what :func:`tiled_attention` does: fewer passes over memory, same numbers).

    Shape:
        m, row_sum: (..., L); acc: (..., L, Dv); scores: (..., L, Sb); value: (..., Sb, Dv).
        Returns (m_new, row_sum_new, acc_new) with the shapes of (m, row_sum, acc).
    """
    _check_online_step(m, row_sum, acc, scores, value)
    m_new = torch.maximum(m, scores.amax(dim=-1))  # (..., L, Sb) -> (..., L)
    # Where every score so far is -inf, subtract 0 instead of -inf (exp(-inf - -inf) is NaN).
    m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
    alpha = torch.exp(m - m_safe)  # (..., L); 0 on the first block (m = -inf)
    if not inplace:
        p = torch.exp(scores - m_safe.unsqueeze(-1))  # (..., L) -> (..., L, 1), broadcast over Sb
        row_sum_new = alpha * row_sum + p.sum(dim=-1)
        acc_new = (
            alpha.unsqueeze(-1) * acc + p @ value
        )  # (..., L, Sb) @ (..., Sb, Dv) -> (..., L, Dv)
        return m_new, row_sum_new, acc_new
    p = scores.sub_(m_safe.unsqueeze(-1)).exp_()  # same p, written over the scores
    row_sum.mul_(alpha).add_(p.sum(dim=-1))
    acc.mul_(alpha.unsqueeze(-1)).add_(p @ value)  # (..., L, Sb) @ (..., Sb, Dv) -> (..., L, Dv)
    return m_new, row_sum, acc


def _check_online_step(m, row_sum, acc, scores, value) -> None:
    """The shapes of one online-softmax step agree: scores (..., L, Sb) with m, row_sum (..., L),
    value (..., Sb, Dv) and acc (..., L, Dv)."""
    check_rank("scores", scores, "(..., L, Sb)", min_rank=2)
    check_rank("value", value, "(..., Sb, Dv)", min_rank=2)
    if value.shape[-2] != scores.shape[-1]:
        raise ValueError(
            f"value: expected shape (..., Sb, Dv) with Sb = {scores.shape[-1]} "
            f"(scores' last size), got {shape_str(value)}"
        )
    rows = tuple(scores.shape[:-1])
    for name, t in (("m", m), ("row_sum", row_sum)):
        if tuple(t.shape) != rows:
            raise ValueError(
                f"{name}: expected shape (..., L) = {rows} (scores without Sb), got {shape_str(t)}"
            )
    if tuple(acc.shape) != (*rows, value.shape[-1]):
        raise ValueError(
            f"acc: expected shape (..., L, Dv) = {(*rows, value.shape[-1])}, got {shape_str(acc)}"
        )


def _check_inputs(query, key, value, block_q, block_k) -> None:
    check_qkv(query, key, value)
    if query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"key: expected the same leading (batch/head) sizes as query {shape_str(query)}, "
            f"got {shape_str(key)}"
        )
    check_positive_int("block_q", block_q, "(query rows per tile)")
    check_positive_int("block_k", block_k, "(key rows per tile)")


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 256,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ · scale) V computed tile by tile, never holding the (L, S) scores.

    Outer loop over query blocks of ``block_q`` rows, inner loop over key/value blocks of
    ``block_k`` rows with :func:`online_softmax_update`. With ``is_causal`` (top-left aligned,
    as torch's SDPA) key blocks wholly above the diagonal are skipped, and only tiles that
    cross the diagonal are masked. Gradients flow (autograd then keeps every tile for the
    backward pass; a real FlashAttention backward recomputes them from the log-sum-exp).

    Args:
        is_causal: query ``i`` attends to keys ``j <= i``.
        scale: multiplies the scores; default ``1 / sqrt(D)``.
        block_q, block_k: tile sizes; the largest intermediate is (..., block_q, block_k).
        return_lse: also return the log-sum-exp of each row's scores, ``m + log(row_sum)`` — what
            a backward pass needs to recompute the weights without storing them.

    Shape:
        query: (..., L, D); key: (..., S, D); value: (..., S, Dv).
        Returns output (..., L, Dv) [and lse (..., L)].
    """
    _check_inputs(query, key, value, block_q, block_k)
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    lead, Dv = query.shape[:-2], value.shape[-1]
    out = query.new_empty(*lead, L, Dv)
    lse = query.new_empty(*lead, L)
    # Overwriting tiles in place saves memory passes but would break autograd's saved tensors.
    inplace = not (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        q = query[..., i0:i1, :] * scale  # (..., Bq, D); scaling q once is cheaper than scores
        m = q.new_full((*lead, i1 - i0), float("-inf"))  # (..., Bq)
        row_sum = q.new_zeros((*lead, i1 - i0))
        acc = q.new_zeros((*lead, i1 - i0, Dv))  # (..., Bq, Dv)
        k_end = min(S, i1) if is_causal else S  # causal: keys past the block's last row unseen
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, k_end)
            scores = q @ key[..., j0:j1, :].transpose(
                -2, -1
            )  # (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
            if is_causal and j1 - 1 > i0:  # the tile crosses the diagonal: mask j > i
                rows = torch.arange(i0, i1, device=query.device).unsqueeze(-1)  # (Bq, 1)
                cols = torch.arange(j0, j1, device=query.device)  # (Bk,)
                scores = scores.masked_fill(cols > rows, float("-inf"))
            m, row_sum, acc = online_softmax_update(
                m, row_sum, acc, scores, value[..., j0:j1, :], inplace=inplace
            )
        safe_sum = torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
        out[..., i0:i1, :] = acc / safe_sum.unsqueeze(-1)  # (..., Bq) -> (..., Bq, 1)
        lse[..., i0:i1] = m + torch.log(row_sum)
    return (out, lse) if return_lse else out

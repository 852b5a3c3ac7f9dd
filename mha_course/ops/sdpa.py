"""Chapter 2: scaled dot-product attention, written to be read.

Same semantics as ``torch.nn.functional.scaled_dot_product_attention`` — bool mask True =
may attend, float mask added to the scores, ``is_causal`` top-left aligned, ``enable_gqa``
repeating key/value heads in contiguous groups — but every step is a visible tensor:
scores, masked scores, weights, output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mha_course._checks import (
    check_broadcast,
    check_kv_heads,
    check_mask_dtype,
    check_qkv,
    check_tensor,
    shape_str,
)
from mha_course.ops.masks import causal_mask


def stable_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax that subtracts the row maximum first, and gives 0 (not NaN) on fully masked rows.

    A row whose scores are all ``-inf`` (every key masked) has no finite maximum; we use 0 for
    it, so ``exp`` gives zeros, the sum is 0, and the row's weights are all 0 — what torch's
    SDPA returns for such rows. (Chapter 1's NumPy version is
    :func:`mha_course.ops.numpy_attention.softmax`.)

    Shape:
        scores: any shape; normalised along ``dim``. Returns the same shape.
    """
    # Any m gives the same softmax, so m needs no gradient (detach: one less backward path).
    # m and total are small (one number per row); only the exp and the division touch every
    # score, which keeps this within ~1.2x of torch's fused softmax (benchmarks: `--targets`).
    if scores.shape[dim] == 0:  # no keys at all (S = 0): nothing to normalise, as torch's SDPA
        return scores.clone()
    m = scores.detach().amax(dim=dim, keepdim=True)
    m = m.masked_fill(m == float("-inf"), 0.0)  # fully masked row: exp(-inf - 0) = 0
    e = (scores - m).exp_()  # in place on the fresh difference: no extra copy of the scores
    total = e.sum(dim=dim, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)  # 0 / 1 = 0 on fully masked rows


def repeat_kv(x: torch.Tensor, n_rep: int, dim: int = -3) -> torch.Tensor:
    """Repeat each key/value head ``n_rep`` times, in contiguous groups (GQA).

    ``repeat_interleave`` gives heads ``[0, 0, 1, 1, ...]`` so query head ``h`` reads
    key/value head ``h // n_rep``; plain ``repeat`` would give ``[0, 1, 0, 1, ...]`` — wrong.

    Shape:
        x: (..., G, S, D). Returns (..., G * n_rep, S, D).
    """
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=dim)  # (..., G, S, D) -> (..., H, S, D)


def _check_inputs(query, key, value, attn_mask, enable_gqa) -> None:
    check_qkv(query, key, value)  # float tensors, (..., L, D), (..., S, D), (..., S, Dv)
    q_batch, k_batch = tuple(query.shape[:-2]), tuple(key.shape[:-2])
    if enable_gqa:
        if query.dim() < 3:
            raise ValueError(
                f"query: enable_gqa needs shape (..., H, L, D), got {shape_str(query)}"
            )
        H, G = q_batch[-1], k_batch[-1]
        check_kv_heads(
            "key",
            H,
            G,
            of="the query heads H (enable_gqa: key/value shape (..., G, S, D))",
            got=f"H = {H} (query {shape_str(query)}), G = {G} (key {shape_str(key)})",
        )
        q_batch, k_batch = q_batch[:-1], k_batch[:-1]  # compare the sizes before the heads
    # Same rank (check_qkv), so broadcasting is size by size. (Not torch.broadcast_shapes: its
    # first call imports sympy, half a second here.)
    if not all(q == k or 1 in (q, k) for q, k in zip(q_batch, k_batch)):
        raise ValueError(
            f"key: expected leading (batch/head) sizes that broadcast with query's "
            f"{shape_str(query)}, got {shape_str(key)}"
        )
    if attn_mask is not None:
        check_tensor("attn_mask", attn_mask)
        check_mask_dtype("attn_mask", attn_mask)
        target = (*query.shape[:-2], query.shape[-2], key.shape[-2])
        check_broadcast("attn_mask", attn_mask, target, "(..., L, S)")


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    enable_gqa: bool = False,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ · scale + mask) V, with the weights materialised.

    Args:
        attn_mask: bool (True = may attend) or float (added to the scores); broadcasts to
            (..., L, S). Not allowed together with ``is_causal``.
        is_causal: query ``i`` attends to keys ``j <= i`` (top-left aligned, as torch).
        scale: multiplies the scores; default ``1 / sqrt(D)``.
        dropout_p: dropout on the weights (applied whenever > 0, as torch's SDPA).
        enable_gqa: key/value have G heads, query H (G divides H); query head ``h`` reads
            key/value head ``h // (H // G)``.
        return_weights: also return the attention weights (after dropout).

    A query whose keys are all masked gets weights 0 and output 0 (as torch), not NaN.

    Shape:
        query: (..., L, D); key: (..., S, D); value: (..., S, Dv).
        With enable_gqa: query (..., H, L, D); key/value (..., G, S, D).
        Returns output (..., L, Dv) [and weights (..., L, S)].
    """
    _check_inputs(query, key, value, attn_mask, enable_gqa)
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask, is_causal: give one or the other, not both")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p: expected a probability in [0, 1], got {dropout_p}")
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    if enable_gqa:
        n_rep = query.shape[-3] // key.shape[-3]
        key, value = (
            repeat_kv(key, n_rep),
            repeat_kv(value, n_rep),
        )  # (..., G, S, D) -> (..., H, S, D)
    scale = 1.0 / math.sqrt(D) if scale is None else scale

    # Scaling the queries (L x D numbers) costs less than scaling the scores (L x S); same result.
    scores = (query * scale) @ key.transpose(-2, -1)  # (..., L, D) @ (..., D, S) -> (..., L, S)
    if is_causal:
        attn_mask = causal_mask(L, S, device=query.device)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(scores.dtype)
    weights = stable_softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    output = weights @ value  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return (output, weights) if return_weights else output

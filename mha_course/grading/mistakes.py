"""Known-wrong variants of attention, reusable by every chapter's ``Mistake``s.

Each function computes what a typical wrong implementation returns, so the grader can say
"your output equals softmax over the wrong axis" instead of "wrong values". They run in the
grading process on the same inputs as the reference.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.caches.base import kv_cache_bytes
from mha_course.ops.masks import causal_mask
from mha_course.ops.sdpa import stable_softmax
from mha_grader.items import Mistake

# Feedback texts shared across chapters (one source of truth for the wording).
NO_SCALE = "missing the 1/sqrt(D) scaling: the scores are sqrt(D) times too large (D = head size)"
SCALE_BY_D = "scaled by 1/D instead of 1/sqrt(D)"
SCALE_BY_E = (
    "scaled by 1/sqrt(E) (the embedding size) instead of 1/sqrt(D) (the head size D = E / H)"
)
WRONG_AXIS = (
    "softmax over the wrong axis: normalise over the keys (the last axis, S), not the queries"
)
MASK_INVERTED = (
    "mask inverted: a bool attn_mask is True where a query MAY attend (SDPA's convention)"
)
ADDITIVE_AS_BOOL = (
    "a float attn_mask is ADDED to the scores: a bias such as ALiBi's (finite values, not only "
    "0 and -inf) was read as allow (0) / block (anything else)"
)
MASK_AFTER_SOFTMAX = (
    "mask applied after the softmax: the weights that remain no longer sum to 1 for each query"
)
OVERFLOW = "softmax not stable on large logits: exp of a large score is inf, and inf / inf is NaN"
CAUSAL_OFF_BY_ONE = (
    "causal mask off by one: query i may attend to keys j <= i (itself "
    "included), no more and no fewer"
)
SPLIT_WITH_VIEW = (
    "heads split with view/reshape only: the shape is (B, H, L, D) but each head's "
    "slice mixes the features of several tokens"
)
REPEAT_NOT_INTERLEAVE = (
    "key/value heads in the order 0, 1, 0, 1, ...: query heads read key/value "
    "heads in turn, not in contiguous groups (GQA's groups are contiguous)"
)
H_INSTEAD_OF_G = (
    "counted the query heads H instead of the key/value heads G: only the G "
    "key/value heads are cached — that is the point of GQA/MQA"
)
NO_FACTOR_2 = "missing the factor 2: the cache holds keys AND values"
NO_W_O = "output projection W_O missing: the output is the merged heads themselves"


def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / sum(exp(x)) without subtracting the maximum (overflows for large x)."""
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def np_naive_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """NumPy ``exp(x) / sum(exp(x))`` (overflows for large x)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)


def attention_variant(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    scale: str = "sqrt_d",
    embed_dim: int | None = None,
    softmax_dim: int = -1,
    mask_mode: str = "ok",
    softmax: str = "stable",
    return_weights: bool = False,
    return_scores: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Attention with one chosen mistake; the defaults give the right answer.

    Args:
        scale: ``"sqrt_d"`` (right), ``"none"``, ``"d"`` (1/D), ``"sqrt_e"`` (1/sqrt(embed_dim)).
        softmax_dim: the axis the softmax runs over (-1 is right; -2 is "over the queries").
        mask_mode: ``"ok"``, ``"inverted"``, ``"after_softmax"`` (weights zeroed, not
            renormalised), ``"as_bool"`` (a float mask read as allow where 0, block elsewhere)
            or ``"ignored"``.
        softmax: ``"stable"`` or ``"naive"`` (overflows on large logits).
        return_weights: return ``(output, weights)``, as the items that ask for the weights too.
        return_scores: return ``(output, weights, scores)``: the scores the softmax saw (scaled,
            masked with -inf; with ``"after_softmax"`` unmasked).

    Shape:
        query (..., L, D), key (..., S, D), value (..., S, Dv), attn_mask broadcasts to
        (..., L, S). Returns (..., L, Dv), and with ``return_weights`` the weights (..., L, S).
    """
    D = query.shape[-1]
    factor = {
        "sqrt_d": 1 / math.sqrt(D),
        "none": 1.0,
        "d": 1 / D,
        "sqrt_e": 1 / math.sqrt(embed_dim or D),
    }[scale]
    scores = (query @ key.transpose(-2, -1)) * factor  # (..., L, D) @ (..., D, S) -> (..., L, S)
    mask = attn_mask
    if mask is not None and mask_mode == "as_bool" and mask.dtype != torch.bool:
        mask = mask == 0  # (L, S) float -> bool, True = may attend
    if mask is not None and mask_mode == "inverted":
        mask = (
            ~mask
            if mask.dtype == torch.bool
            else torch.where(
                torch.isinf(mask), torch.zeros_like(mask), torch.full_like(mask, float("-inf"))
            )
        )
    if mask is not None and mask_mode in ("ok", "inverted", "as_bool"):
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)
    seen = scores
    soft = stable_softmax if softmax == "stable" else naive_softmax
    weights = soft(scores, dim=softmax_dim)
    if mask is not None and mask_mode == "after_softmax":
        allowed = mask if mask.dtype == torch.bool else torch.isfinite(mask)
        weights = weights * allowed.to(weights.dtype)
    out = weights @ value  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    if return_scores:
        return out, weights, seen
    return (out, weights) if return_weights else out


def causal_mask_variant(
    L: int, S: int | None = None, offset: int = 0, *, shift: int = 0, inverted: bool = False
) -> torch.Tensor:
    """The causal mask with its diagonal moved by ``shift`` (off by one) and/or inverted.

    Shape:
        Returns (L, S), bool, True = may attend.
    """
    m = (
        causal_mask(L, S, offset=offset + shift)
        if offset + shift >= 0
        else torch.tril(
            torch.ones(L, S if S is not None else L + offset, dtype=torch.bool),
            diagonal=offset + shift,
        )
    )
    return ~m if inverted else m


def split_heads_with_view(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The classic mistake: ``x.view(B, H, L, D)`` instead of ``view(B, L, H, D).transpose(1, 2)``.

    Shape:
        x: (B, L, E). Returns (B, H, L, D) with the tokens scrambled across heads.
    """
    B, L, E = x.shape
    return x.reshape(B, num_heads, L, E // num_heads)  # (B, L, E) -> (B, H, L, D), scrambled


def repeat_kv_with_repeat(x: torch.Tensor, n_rep: int, dim: int = -3) -> torch.Tensor:
    """GQA's classic mistake: ``repeat`` (heads 0, 1, 0, 1) instead of ``repeat_interleave``.

    Shape:
        x: (..., G, S, D). Returns (..., G * n_rep, S, D) in the wrong head order.
    """
    reps = [1] * x.dim()
    reps[dim] = n_rep
    return x.repeat(*reps)  # (..., G, S, D) -> (..., G * n_rep, S, D), order 0, 1, 0, 1


def kv_cache_bytes_variant(
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    batch: int,
    dtype: torch.dtype,
    *,
    count_query_heads: bool = False,
    keys_and_values: bool = True,
) -> int:
    """The graders' one reference for KV-cache bytes (chapter 7's :func:`kv_cache_bytes`), with
    the two classic mistakes as switches: H counted instead of G, and keys only (no factor 2)."""
    G = num_heads if count_query_heads else num_kv_heads
    nbytes = kv_cache_bytes(num_layers, G, head_dim, seq_len=seq_len, batch=batch, dtype=dtype)
    return nbytes if keys_and_values else nbytes // 2


def kv_bytes_mistakes(reference) -> tuple[Mistake, ...]:
    """ "H instead of G" and "no factor 2" for an item whose ``reference(*args, **switches)``
    passes :func:`kv_cache_bytes_variant`'s switches on (chapters 7 and 8)."""
    return (
        Mistake(
            "H instead of G",
            H_INSTEAD_OF_G,
            variant=lambda *a: reference(*a, count_query_heads=True),
        ),
        Mistake(
            "no factor 2", NO_FACTOR_2, variant=lambda *a: reference(*a, keys_and_values=False)
        ),
    )

"""Chapters 4–7, 12 and 14: one call's inputs to
:class:`~mha_course.attention.mha.MultiHeadAttention`, made ready before anything changes.

The query, key and value are checked (rank, widths, dtype, matching B and S); every mask the call
brings — ``attn_mask``, ``key_padding_mask``, causality offset by the cached length, ALiBi's bias —
is combined into ONE SDPA-convention mask (bool True = may attend, or additive), built at the size
of the keys the cache will return (:meth:`~mha_course.caches.base.Cache.mask_positions`), never
over every position seen; ``head_mask`` becomes per-head multipliers. All of it runs before the
cache grows, so a rejected call leaves the cache as it was.

Letters: B batch, H query heads, L query length, S key/value length (cached positions included),
E embed_dim.
"""

from __future__ import annotations

import torch

from mha_course._checks import (
    check_broadcast,
    check_float,
    check_mask_dtype,
    check_rank,
    check_tensor,
    shape_str,
)
from mha_course.ops.masks import causal_mask, combine_masks, key_padding_to_attn_mask
from mha_course.ops.positions import alibi_bias


def check_inputs(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    widths: tuple[int, int, int],
    dtype: torch.dtype,
) -> None:
    """``widths`` = (E, kdim, vdim); ``dtype`` the module's parameters'.

    Shape:
        query: (B, L, E); key: (B, S, kdim); value: (B, S, vdim).
    """
    E = widths[0]
    if (  # self-attention on a float (B, L, E) tensor of the parameters' dtype: all is well
        key is query
        and value is query
        and type(query) is torch.Tensor
        and query.dim() == 3
        and query.shape[-1] == E == widths[1] == widths[2]
        and query.dtype == dtype
        and query.is_floating_point()
    ):
        return  # (one decode step: these few comparisons instead of every check below)
    for name, t, width, letters in (
        ("query", query, E, "(B, L, E)"),
        ("key", key, widths[1], "(B, S, kdim)"),
        ("value", value, widths[2], "(B, S, vdim)"),
    ):
        if name != "query" and t is query and width == E:
            continue  # self-attention: key/value are the query tensor, checked already
        check_tensor(name, t)
        check_float(name, t)
        check_rank(name, t, letters, rank=3)
        if t.shape[-1] != width:
            raise ValueError(
                f"{name}: expected shape {letters} with last size {width}, got {shape_str(t)}"
            )
        if t.dtype != dtype:
            raise ValueError(
                f"{name}: expected dtype {dtype} (the module's parameters), "
                f"got {t.dtype}; cast the input or the module (e.g. module.double())"
            )
    if key.shape[0] != query.shape[0] or value.shape[0] != query.shape[0]:
        raise ValueError(
            f"key/value: expected shapes (B, S, kdim) / (B, S, vdim) with B = {query.shape[0]} "
            f"(query's batch size), got key {shape_str(key)}, value {shape_str(value)}"
        )
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            f"value: expected shape (B, S, vdim) with S = {key.shape[1]} (key's length), "
            f"got {shape_str(value)}"
        )


def build_mask(
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    is_causal: bool,
    shape: tuple[int, int, int, int],
    offset: int,
    dtype: torch.dtype,
    device: torch.device,
    positions: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """One SDPA-convention mask (bool True = may attend, or additive) broadcastable to
    ``shape`` = (B, H, L, S), or None. Query ``i`` sits at position ``offset + i``. With
    ``positions`` (the keys a cache will return) it is built over those keys only.

    Shape:
        attn_mask: (L, S), (B, L, S) or (B, H, L, S); key_padding_mask: (B, S);
        positions: (S_read,). Returns (B or 1, H or 1, L, S_read) or None.
    """
    B, H, L, S = shape
    if attn_mask is not None:
        check_tensor("attn_mask", attn_mask)
        check_mask_dtype("attn_mask", attn_mask)
        if attn_mask.dim() not in (2, 3, 4):
            raise ValueError(
                f"attn_mask: expected shape (L, S), (B, L, S) or (B, H, L, S), "
                f"got {shape_str(attn_mask)}"
            )
        if attn_mask.dim() == 3:  # (B, L, S); torch's module would take (B*H, L, S) here
            check_broadcast("attn_mask", attn_mask, (B, L, S), "(B, L, S)")
            attn_mask = attn_mask.unsqueeze(1)  # (B, L, S) -> (B, 1, L, S)
        check_broadcast("attn_mask", attn_mask, (B, H, L, S), "(B, H, L, S)")
    kpm = None
    if key_padding_mask is not None:
        kpm = key_padding_to_attn_mask(key_padding_mask, B, S)  # (B, S) -> (B, 1, 1, S)
    # One new query at the end (a decode step, S = offset + 1) sees every key: no mask.
    needs_causal = is_causal and not (L == 1 and S == offset + 1)
    if positions is None:
        causal = causal_mask(L, S, offset=offset, device=device) if needs_causal else None
        return combine_masks(attn_mask, kpm, causal, dtype=dtype)
    j = positions.to(device)  # (S_read,) the positions of the keys the cache will return
    if attn_mask is not None and attn_mask.shape[-1] != 1:
        attn_mask = attn_mask[..., j]  # (..., L, S) -> (..., L, S_read)
    if kpm is not None:
        kpm = kpm[..., j]  # (B, 1, 1, S) -> (B, 1, 1, S_read)
    # query i sits at position offset + i: (L, 1) vs (1, S_read) -> (L, S_read)
    causal = (
        j[None, :] <= torch.arange(offset, offset + L, device=device)[:, None]
        if needs_causal
        else None
    )
    return combine_masks(attn_mask, kpm, causal, dtype=dtype)


def add_alibi(
    mask: torch.Tensor | None,
    slopes: torch.Tensor,
    L: int,
    S: int,
    offset: int,
    dtype: torch.dtype,
    device: torch.device,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """``mask`` plus ALiBi's bias ``-slope_h * |i - j|`` (query ``i`` at position ``offset + i``),
    over the keys at ``positions`` only when given (chapter 12).

    Shape:
        slopes: (H,). Returns a mask broadcastable to (B, H, L, S_read).
    """
    bias = alibi_bias(
        len(slopes), L, S, offset=offset, slopes=slopes, dtype=dtype, device=device
    )  # (H, L, S)
    if positions is not None:
        bias = bias[..., positions.to(device)]  # (H, L, S) -> (H, L, S_read)
    return combine_masks(mask, bias, dtype=dtype)


def head_multipliers(head_mask: torch.Tensor, B: int, H: int, dtype: torch.dtype) -> torch.Tensor:
    """(H,) or (B, H) head mask -> (B or 1, H, 1, 1) multipliers on each head's output.

    Shape:
        head_mask: (H,) or (B, H). Returns (1 or B, H, 1, 1).
    """
    check_tensor("head_mask", head_mask)
    if head_mask.shape not in ((H,), (B, H)):
        raise ValueError(
            f"head_mask: expected shape (H,) = ({H},) or (B, H) = ({B}, {H}), "
            f"got {shape_str(head_mask)}"
        )
    m = head_mask.to(dtype)
    return m.reshape(-1, H, 1, 1)  # (H,) or (B, H) -> (1 or B, H, 1, 1)

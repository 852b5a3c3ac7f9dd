"""Mask helpers. The course follows SDPA's convention everywhere:
a bool ``attn_mask`` is True where a query MAY attend; a float mask is ADDED to the scores.
A ``key_padding_mask`` is the one exception (as in torch): True marks PADDING to ignore."""

from __future__ import annotations

import torch

from mha_course._checks import check_mask_dtype, check_rank, check_tensor, shape_str


def causal_mask(
    L: int, S: int | None = None, offset: int = 0, device: torch.device | str | None = None
) -> torch.Tensor:
    """Bool mask, True = may attend: query ``i`` sees keys ``j <= i + offset``.

    ``offset`` is the number of keys that come before the first query — the length of a
    KV cache. ``offset=0`` is torch's ``is_causal`` (top-left aligned).

    Shape:
        Returns (L, S) with S = L + offset by default.
    """
    S = L + offset if S is None else S
    if L < 0 or S < 0 or offset < 0:
        raise ValueError(
            f"L, S, offset: expected non-negative integers, got L={L}, S={S}, offset={offset}"
        )
    ones = torch.ones(L, S, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=offset)


def padding_mask(
    lengths: torch.Tensor | list[int],
    S: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Key padding mask from sequence lengths: True = padding (position >= length).

    Shape:
        lengths: (B,). Returns (B, S) with S = max(lengths) by default.
    """
    lengths = torch.as_tensor(lengths, device=device)
    check_rank("lengths", lengths, "(B,)", rank=1)
    S = int(lengths.max()) if S is None else S
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return positions[None, :] >= lengths[:, None]  # (1, S) vs (B, 1) -> (B, S)


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Turn a bool "may attend" mask into an additive one: 0 where allowed, -inf where not.

    Shape:
        mask: any shape. Returns the same shape in ``dtype``.
    """
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))


def torch_mha_mask_to_sdpa(mask: torch.Tensor) -> torch.Tensor:
    """Convert an ``nn.MultiheadAttention`` ``attn_mask`` to the course's (SDPA's) convention.

    ``nn.MultiheadAttention`` reads a bool mask the opposite way, True = BLOCKED; SDPA and this
    course read True = MAY attend. A bool mask is therefore negated, ``allowed = ~blocked``. A float
    mask means the same in both (added to the scores) and is returned unchanged.

    Shape:
        mask: (L, S) or (B * H, L, S) as torch's module takes it. Returns the same shape and dtype.
    """
    check_tensor("mask", mask)
    check_mask_dtype("mask", mask)
    return ~mask if mask.dtype == torch.bool else mask


def combine_masks(
    *masks: torch.Tensor | None, dtype: torch.dtype = torch.float32
) -> torch.Tensor | None:
    """Combine several SDPA-convention masks into one (broadcasting their shapes).

    All bool: logical AND (a key is visible only if every mask allows it). Any float:
    everything becomes additive (``dtype``) and the masks are summed.

    Shape:
        masks: shapes that broadcast together, e.g. (L, S), (B, 1, 1, S) and (B, H, L, S).
        Returns their broadcast shape, or None when every mask is None.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    out = to_additive(present[0], dtype)
    for m in present[1:]:
        out = out + to_additive(m, dtype)
    return out


def key_padding_to_attn_mask(key_padding_mask: torch.Tensor, B: int, S: int) -> torch.Tensor:
    """Key padding ``(B, S)`` with True = padding → SDPA mask ``(B, 1, 1, S)``, True = may attend.

    A float key padding mask is taken as additive and only reshaped.

    Shape:
        key_padding_mask: (B, S). Returns (B, 1, 1, S), broadcasting over heads and queries.
    """
    check_tensor("key_padding_mask", key_padding_mask)
    check_mask_dtype("key_padding_mask", key_padding_mask)
    if key_padding_mask.shape != (B, S):
        raise ValueError(
            f"key_padding_mask: expected shape (B, S) = ({B}, {S}), got {shape_str(key_padding_mask)}"
        )
    m = key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
    return ~m if m.dtype == torch.bool else m

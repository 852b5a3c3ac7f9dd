"""Chapters 8, 9, 17 and 18: one registry of attention functions, one signature, and why a call
did not take the fast path.

Every entry computes ``softmax(Q Kᵀ · scale + mask) V`` with the same signature, so a module picks
one by name (``MultiHeadAttention(impl="tiled")``), as transformers' ``ALL_ATTENTION_FUNCTIONS``
lets a model pick its kernel::

    fn(query, key, value, *, attn_mask=None, is_causal=False, scale=None, dropout_p=0.0,
       enable_gqa=False) -> output

========  ==============================================================  =====================
name      what runs                                                       takes
========  ==============================================================  =====================
eager     the course's readable SDPA (chapter 2): the (L, S) weights      everything; weights
sdpa      ``torch.nn.functional.scaled_dot_product_attention``: torch     masks, dropout, GQA
          picks its fused kernel (chapter 8)
tiled     chapter 9's tiles and online softmax: no (L, S) matrix          is_causal only
flash     chapter 17's FlashAttention in PyTorch: its backward            is_causal only
          recomputes the weights from the log-sum-exp
triton    chapter 17's Triton FlashAttention-2 (interpreted on a CPU)     is_causal, GQA
flex      torch's FlexAttention (chapter 18), causality as a mask_mod     is_causal only
========  ==============================================================  =====================

A function that cannot serve a call (a mask it does not take, dropout, weights asked for) is not
called: :func:`why_not` says why, in words, and the caller runs ``eager`` instead — as PyTorch's
``nn.MultiheadAttention`` reports ``why_not_fast_path``. ``is_causal`` is top-left aligned (as
SDPA's): a causal step after cached tokens is a mask, not ``is_causal``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mha_course.kernels.flash_backward import flash_attention
from mha_course.kernels.tiled import tiled_attention
from mha_course.ops.sdpa import repeat_kv, scaled_dot_product_attention


@dataclass(frozen=True)
class AttentionFunction:
    """One entry of :data:`ATTENTION_FUNCTIONS`: the function and what it can take."""

    name: str
    run: Callable[..., torch.Tensor]
    masks: bool  # an arbitrary attn_mask (bool or additive), not only is_causal
    dropout: bool
    gqa: bool  # G key/value heads < H query heads without repeating them first
    summary: str
    cpu_backward: bool = True  # FlexAttention has no backward on a CPU

    def why_not(
        self,
        *,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        need_weights: bool = False,
        query: torch.Tensor | None = None,
    ) -> str | None:
        """Why this function cannot serve the call (one sentence), or None if it can."""
        if (
            not self.cpu_backward
            and query is not None
            and query.requires_grad
            and query.device.type == "cpu"
        ):
            return f"{self.name} has no backward on a CPU (the inputs require grad)"
        if need_weights and self.name != "eager":
            return f"{self.name} returns no weights (need_weights=True runs eager)"
        if attn_mask is not None and not self.masks:
            return (
                f"{self.name} takes is_causal but no attn_mask (this call has a mask: padding, a "
                "cache offset, a window or a bias)"
            )
        if dropout_p > 0 and not self.dropout:
            return f"{self.name} has no dropout (dropout_p={dropout_p} while training)"
        return None


def _eager(
    query,
    key,
    value,
    *,
    attn_mask=None,
    is_causal=False,
    scale=None,
    dropout_p=0.0,
    enable_gqa=False,
):
    return scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        dropout_p=dropout_p,
        enable_gqa=enable_gqa,
    )


def _sdpa(
    query,
    key,
    value,
    *,
    attn_mask=None,
    is_causal=False,
    scale=None,
    dropout_p=0.0,
    enable_gqa=False,
):
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        dropout_p=dropout_p,
        enable_gqa=enable_gqa,
    )


def _heads_repeated(fn):
    """A kernel without GQA: each key/value head repeated for its H / G query heads first."""

    def run(
        query,
        key,
        value,
        *,
        attn_mask=None,
        is_causal=False,
        scale=None,
        dropout_p=0.0,
        enable_gqa=False,
    ):
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            n_rep = query.shape[-3] // key.shape[-3]
            key, value = (
                repeat_kv(key, n_rep),
                repeat_kv(value, n_rep),
            )  # (B, G, S, D) -> (B, H, S, D)
        return fn(query, key, value, is_causal=is_causal, scale=scale)

    return run


def _triton(
    query,
    key,
    value,
    *,
    attn_mask=None,
    is_causal=False,
    scale=None,
    dropout_p=0.0,
    enable_gqa=False,
):
    from mha_course.kernels.triton_flash import triton_flash_attention  # Triton set up on first use

    return triton_flash_attention(query, key, value, is_causal=is_causal, scale=scale)


def _flex(query, key, value, *, is_causal=False, scale=None, **_):
    from torch.nn.attention.flex_attention import create_block_mask

    from mha_course.ops.flex_masks import causal, flex_attention

    L, S = query.shape[-2], key.shape[-2]
    mask = create_block_mask(causal, None, None, L, S, device=query.device) if is_causal else None
    return flex_attention(query, key, value, block_mask=mask, scale=scale)


ATTENTION_FUNCTIONS: dict[str, AttentionFunction] = {
    f.name: f
    for f in (
        AttentionFunction(
            "eager",
            _eager,
            masks=True,
            dropout=True,
            gqa=True,
            summary="the course's SDPA: the (L, S) weights materialised",
        ),
        AttentionFunction(
            "sdpa",
            _sdpa,
            masks=True,
            dropout=True,
            gqa=True,
            summary="torch's scaled_dot_product_attention: torch picks a fused kernel",
        ),
        AttentionFunction(
            "tiled",
            _heads_repeated(tiled_attention),
            masks=False,
            dropout=False,
            gqa=False,
            summary="chapter 9: tiles and the online softmax, no (L, S) matrix",
        ),
        AttentionFunction(
            "flash",
            _heads_repeated(flash_attention),
            masks=False,
            dropout=False,
            gqa=False,
            summary="chapter 17: FlashAttention in PyTorch, backward from the log-sum-exp",
        ),
        AttentionFunction(
            "triton",
            _triton,
            masks=False,
            dropout=False,
            gqa=True,
            summary="chapter 17: FlashAttention-2 in Triton (its interpreter on a CPU)",
        ),
        AttentionFunction(
            "flex",
            _heads_repeated(_flex),
            masks=False,
            dropout=False,
            gqa=False,
            summary="chapter 18: torch's FlexAttention, causality as a mask_mod",
            cpu_backward=False,
        ),
    )
}


def attention_function(name: str) -> AttentionFunction:
    """The registry's entry ``name``; a ValueError naming the choices otherwise."""
    if name not in ATTENTION_FUNCTIONS:
        raise ValueError(f"impl: expected one of {tuple(ATTENTION_FUNCTIONS)}, got {name!r}")
    return ATTENTION_FUNCTIONS[name]

"""Build the course's module from ``torch.nn.MultiheadAttention`` (same weights, same output).

Mind the opposite mask conventions: in ``nn.MultiheadAttention`` a bool ``attn_mask`` is True
where attention is NOT allowed; in the course (and SDPA) True means MAY attend. Convert with
``~mask``. ``key_padding_mask`` means the same in both (True = padding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .mha import MultiHeadAttention


def from_torch_mha(cls: type[MultiHeadAttention], module: nn.MultiheadAttention,
                   impl: str = "sdpa") -> MultiHeadAttention:
    """Copy the weights of ``module`` into a new ``cls`` (packed or separate in-projections,
    with or without bias, any kdim/vdim). ``add_bias_kv`` and ``add_zero_attn`` have no
    counterpart in the course and raise ``ValueError``.

    The copy is always batch-first ``(B, L, E)``; for a module with ``batch_first=False`` give
    it ``x.transpose(0, 1)``. Its ``need_weights=True`` returns per-head weights
    ``(B, H, L, S)``: their mean over H is torch's default (averaged) output.
    """
    if not isinstance(module, nn.MultiheadAttention):
        raise ValueError(f"module: expected torch.nn.MultiheadAttention, got {type(module).__name__}")
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("module: add_bias_kv / add_zero_attn have no equivalent in MultiHeadAttention")
    E, H = module.embed_dim, module.num_heads
    has_bias = module.in_proj_bias is not None
    w = module.out_proj.weight
    ours = cls(E, H, bias=has_bias, dropout=module.dropout, kdim=module.kdim, vdim=module.vdim,
               impl=impl, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        if module._qkv_same_embed_dim:
            W_Q, W_K, W_V = module.in_proj_weight.chunk(3, dim=0)  # (3E, E) -> 3 × (E, E)
        else:
            W_Q, W_K, W_V = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        ours.q_proj.weight.copy_(W_Q)
        ours.k_proj.weight.copy_(W_K)
        ours.v_proj.weight.copy_(W_V)
        ours.out_proj.weight.copy_(module.out_proj.weight)
        if has_bias:
            b_Q, b_K, b_V = module.in_proj_bias.chunk(3)  # (3E,) -> 3 × (E,)
            ours.q_proj.bias.copy_(b_Q)
            ours.k_proj.bias.copy_(b_K)
            ours.v_proj.bias.copy_(b_V)
            ours.out_proj.bias.copy_(module.out_proj.bias)
    ours.train(module.training)
    return ours

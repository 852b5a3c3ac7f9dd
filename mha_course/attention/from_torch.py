"""Chapter 4: the course's :class:`~mha_course.attention.mha.MultiHeadAttention` holding the
weights of a ``torch.nn.MultiheadAttention`` (``MultiHeadAttention.from_torch`` calls this).

torch packs the three input projections into one ``in_proj_weight`` (3E, E) when query, key and
value share the width E, and keeps ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``
apart when they do not (kdim, vdim); the course always has four ``nn.Linear``.
"""

from __future__ import annotations

import torch
from torch import nn


def from_torch_module(cls: type, module: nn.MultiheadAttention, impl: str = "sdpa") -> nn.Module:
    """``cls`` (MultiHeadAttention or a subclass) with ``module``'s weights, biases, dropout and
    training mode; see ``MultiHeadAttention.from_torch`` for the mask conventions."""
    if not isinstance(module, nn.MultiheadAttention):
        raise ValueError(
            f"module: expected torch.nn.MultiheadAttention, got {type(module).__name__}"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError(
            "module: add_bias_kv / add_zero_attn have no equivalent in MultiHeadAttention"
        )
    has_bias = module.in_proj_bias is not None
    w = module.out_proj.weight
    ours = cls(
        module.embed_dim,
        module.num_heads,
        bias=has_bias,
        dropout=module.dropout,
        kdim=module.kdim,
        vdim=module.vdim,
        impl=impl,
        device=w.device,
        dtype=w.dtype,
    )
    with torch.no_grad():
        if module._qkv_same_embed_dim:
            W_Q, W_K, W_V = module.in_proj_weight.chunk(3, dim=0)  # (3E, E) -> 3 × (E, E)
        else:
            W_Q, W_K, W_V = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        for lin, W in (
            (ours.q_proj, W_Q),
            (ours.k_proj, W_K),
            (ours.v_proj, W_V),
            (ours.out_proj, module.out_proj.weight),
        ):
            lin.weight.copy_(W)
        if has_bias:
            b_Q, b_K, b_V = module.in_proj_bias.chunk(3)  # (3E,) -> 3 × (E,)
            for lin, b in (
                (ours.q_proj, b_Q),
                (ours.k_proj, b_K),
                (ours.v_proj, b_V),
                (ours.out_proj, module.out_proj.bias),
            ):
                lin.bias.copy_(b)
    ours.train(module.training)
    return ours

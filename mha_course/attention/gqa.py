"""Chapter 7: grouped-query attention helpers — which query head reads which key/value head and
converting a trained MHA module to GQA/MQA. How many bytes a KV cache holds (``kv_cache_bytes``,
chapter 7's formula) lives with the caches, in :mod:`mha_course.caches.base`.

The attention itself lives in :class:`mha_course.MultiHeadAttention` (``num_kv_heads=G``);
this module only adds what chapter 7 needs around it.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_kv_heads
from mha_course.attention.mha import MultiHeadAttention


def kv_group_of_query_heads(num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """The key/value head each query head reads: ``h // (H // G)`` (contiguous groups).

    This is the convention of torch's ``enable_gqa`` and of :func:`mha_course.repeat_kv`.

    Shape:
        Returns (H,) int64, entry ``h`` in ``[0, G)``.
    """
    check_kv_heads("num_kv_heads", num_heads, num_kv_heads)
    return torch.arange(num_heads) // (num_heads // num_kv_heads)


def mean_pool_heads(weight: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """Average contiguous groups of heads in a key/value projection weight or bias.

    Rows ``h * D : (h + 1) * D`` belong to head ``h``; new head ``g`` is the mean of old heads
    ``g * r ... (g + 1) * r - 1`` with ``r = num_heads / num_kv_heads`` (GQA's contiguous groups).

    Shape:
        weight: (H * D, ...) -> (G * D, ...), with H = ``num_heads``, G = ``num_kv_heads``.
    """
    check_kv_heads("num_kv_heads", num_heads, num_kv_heads)
    if weight.dim() < 1 or weight.shape[0] % num_heads != 0:
        raise ValueError(
            f"weight: expected shape (H * D, ...) with H = {num_heads}, got {tuple(weight.shape)}"
        )
    D, rest = weight.shape[0] // num_heads, weight.shape[1:]
    grouped = weight.reshape(
        num_kv_heads, num_heads // num_kv_heads, D, *rest
    )  # (H*D, ...) -> (G, H/G, D, ...)
    return grouped.mean(dim=1).reshape(num_kv_heads * D, *rest)  # -> (G, D, ...) -> (G*D, ...)


def mha_to_gqa(module: MultiHeadAttention, num_kv_heads: int) -> MultiHeadAttention:
    """A new module with G = ``num_kv_heads`` key/value heads, each the mean of its group.

    As in the GQA paper (Ainslie et al., 2023): the key and value projection weights (and
    biases) of the heads in one group are mean-pooled; ``q_proj`` and ``out_proj`` are copied
    unchanged. Query head ``h`` keeps reading the (pooled) head of its group ``h // (H // G)``.
    If the heads of each group were already identical, the output is unchanged. ``module``
    is not modified; it may itself be GQA, as long as G divides its ``num_kv_heads``.

    Shape:
        k_proj.weight, v_proj.weight: (G_src * D, kdim) -> (G * D, kdim);
        biases (G_src * D,) -> (G * D,).
    """
    if not isinstance(module, MultiHeadAttention):
        raise ValueError(
            f"module: expected a mha_course.MultiHeadAttention, got {type(module).__name__} "
            f"(convert torch's with MultiHeadAttention.from_torch first)"
        )
    H, G_src = module.num_heads, module.num_kv_heads
    check_kv_heads(
        "num_kv_heads",
        G_src,
        num_kv_heads,
        of=f"the module's key/value heads G_src = {G_src} (H = {H})",
        got=f"{num_kv_heads!r}",
    )
    w = module.q_proj.weight
    new = MultiHeadAttention(
        module.embed_dim,
        H,
        num_kv_heads=num_kv_heads,
        bias=module.q_proj.bias is not None,
        dropout=module.dropout,
        kdim=module.kdim,
        vdim=module.vdim,
        impl=module.impl,
        device=w.device,
        dtype=w.dtype,
        rope=module.rope,
        rope_base=module.rope_base,
        alibi=module.alibi,
    )
    if module.alibi:
        new.alibi_slopes = module.alibi_slopes.clone()
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            new.get_submodule(name).load_state_dict(module.get_submodule(name).state_dict())
        for name in ("k_proj", "v_proj"):
            old_lin, new_lin = module.get_submodule(name), new.get_submodule(name)
            new_lin.weight.copy_(mean_pool_heads(old_lin.weight, G_src, num_kv_heads))
            if old_lin.bias is not None:
                new_lin.bias.copy_(mean_pool_heads(old_lin.bias, G_src, num_kv_heads))
    new.train(module.training)
    return new

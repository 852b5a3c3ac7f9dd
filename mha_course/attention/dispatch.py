"""Chapter 8: which attention function runs one call of
:class:`~mha_course.attention.mha.MultiHeadAttention`, and why.

The module names a function of the one registry (``impl=``,
:data:`~mha_course.attention.functions.ATTENTION_FUNCTIONS`). A call that function cannot serve (a
mask it does not take, dropout, the weights asked for) runs the course's eager SDPA instead, and
the reason comes back with the name of what ran — as PyTorch's ``nn.MultiheadAttention`` reports
``why_not_fast_path``; the module keeps the pair as ``.dispatch``.
"""

from __future__ import annotations

import torch

from mha_course.attention.functions import ATTENTION_FUNCTIONS
from mha_course.ops.sdpa import scaled_dot_product_attention


def run_attention(
    impl: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None,
    only_causal: bool,
    dropout_p: float,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[str, str | None]]:
    """Attention by the registry's ``impl``, or eager when it cannot serve the call.

    ``mask`` is the call's whole mask; ``only_causal`` says it is nothing but SDPA's top-left
    causal mask, which a kernel takes as ``is_causal`` instead. Key/value heads G < H are shared
    by groups (GQA).

    Shape:
        q: (B, H, L, D); k, v: (B, G, S, D); mask: broadcastable to (B, H, L, S) or None.
        Returns out (B, H, L, D), weights (B, H, L, S) when eager ran (else None), and
        (the function that ran, why the chosen one did not or None).
    """
    gqa = k.shape[1] != q.shape[1]
    call_mask = None if only_causal else mask
    chosen = ATTENTION_FUNCTIONS[impl]
    why = chosen.why_not(
        attn_mask=call_mask, dropout_p=dropout_p, need_weights=need_weights, query=q
    )
    if why is None and impl != "eager":  # let the chosen kernel run (torch's: its fastest)
        out = chosen.run(
            q,
            k,
            v,
            attn_mask=call_mask,
            is_causal=only_causal,
            dropout_p=dropout_p,
            enable_gqa=gqa,
        )  # (B, H, L, D)
        return out, None, (impl, None)
    out, weights = scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=gqa, return_weights=True
    )  # out (B, H, L, D), weights (B, H, L, S)
    return out, weights, ("eager", why)

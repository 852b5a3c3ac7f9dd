"""Chapter 13: the same GPT built from torch's own parts — the yardstick of the benchmarks.

:func:`torch_reference` copies a :class:`GPT` and swaps every block's attention for
:class:`TorchCausalAttention` (four ``nn.Linear`` and ``F.scaled_dot_product_attention``, no
checks, no masks object), keeping the weights. :func:`static_decode` is the minimal
generation loop production code would write: key/value buffers allocated once per layer,
each step writes one position in place and attends over the filled part.

Both exist so ``benchmarks/gpt_train_step.py`` and ``benchmarks/gpt_decode.py`` can put the
course's model next to them; ``tests/test_gpt.py`` checks they compute the same thing.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from mha_course.gpt.model import GPT


class TorchCausalAttention(nn.Module):
    """Causal self-attention from ``nn.Linear`` and ``F.scaled_dot_product_attention``, with
    the same parameter names as :class:`mha_course.MultiHeadAttention` (MHA/GQA/MQA).

    Shape:
        x: (B, T, E). Returns (output (B, T, E), None).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, bias: bool) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        kv = num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        is_causal: bool = True,
        kv_cache=None,
        head_mask=None,
        need_weights: bool = False,
    ):
        B, T, E = x.shape
        H, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, T, E) -> (B, H, T, D)
        k = self.k_proj(x).view(B, T, G, D).transpose(1, 2)  # (B, T, G*D) -> (B, G, T, D)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=G != H)
        return self.out_proj(
            out.transpose(1, 2).reshape(B, T, E)
        ), None  # (B, H, T, D) -> (B, T, E)


def torch_reference(model: GPT) -> GPT:
    """A copy of ``model`` whose attention layers are :class:`TorchCausalAttention` (same
    weights). Supports learned positions and no caches (what the benchmarks need)."""
    ref = copy.deepcopy(model)
    c = model.config
    for block in ref.blocks:
        attn = TorchCausalAttention(c.n_embd, c.n_head, c.kv_heads, c.bias)
        attn.load_state_dict(block.attn.state_dict())
        block.attn = attn.to(block.ln_1.weight.dtype)
    return ref


@torch.no_grad()
def static_decode(model: GPT, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding with preallocated per-layer key/value buffers and torch's SDPA only.

    Shape:
        prompt: (B, P) with P + max_new_tokens <= context_length. Returns (B, P + max_new_tokens).
    """
    c = model.config
    B, P = prompt.shape
    H, G, D, T = c.n_head, c.kv_heads, c.head_dim, P + max_new_tokens
    if c.positions != "learned" or T > c.context_length:
        raise ValueError(f"prompt: expected learned positions and P + new <= {c.context_length}")
    w = model.wte.weight
    ks = [w.new_empty(B, G, T, D) for _ in model.blocks]  # allocated once
    vs = [w.new_empty(B, G, T, D) for _ in model.blocks]
    out = torch.empty(B, T, dtype=torch.long)
    out[:, :P] = prompt
    pos, ids = 0, prompt
    for _ in range(max_new_tokens):
        L = ids.shape[1]
        x = model.wte(ids) + model.wpe.weight[pos : pos + L]  # (B, L, E)
        for i, block in enumerate(model.blocks):
            a = block.attn
            h = block.ln_1(x)
            q = a.q_proj(h).view(B, L, H, D).transpose(1, 2)  # (B, L, E) -> (B, H, L, D)
            ks[i][:, :, pos : pos + L] = a.k_proj(h).view(B, L, G, D).transpose(1, 2)
            vs[i][:, :, pos : pos + L] = a.v_proj(h).view(B, L, G, D).transpose(1, 2)
            k, v = ks[i][:, :, : pos + L], vs[i][:, :, : pos + L]  # views of the filled part
            o = F.scaled_dot_product_attention(q, k, v, is_causal=L > 1, enable_gqa=G != H)
            x = x + a.out_proj(o.transpose(1, 2).reshape(B, L, -1))  # (B, H, L, D) -> (B, L, E)
            x = x + block.mlp(block.ln_2(x))
        next_id = model.lm_head(model.ln_f(x[:, -1])).argmax(-1, keepdim=True)  # (B, 1)
        pos += L
        out[:, pos] = next_id[:, 0]
        ids = next_id
    return out

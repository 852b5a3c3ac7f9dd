"""Chapter 20: DeepSeek V3's multi-head latent attention, on the course's latent cache.

Chapter 15's MLA with the three things DeepSeek adds: queries through their own low-rank
bottleneck (``q_a`` -> RMSNorm -> ``q_b``), an RMSNorm on the cached latent, and a value head
size Dv of its own. Per token the cache holds the normalised latent (C features) and one
rotated key of R features shared by all heads (:class:`~mha_course.attention.mla.LatentKVCache`); each
step expands the whole latent to per-head keys and values (the explicit form; chapter 15's
absorbed form is equal and cheaper for decode).

Letters: B batch, L new positions, S all positions, E width, H heads, D the non-rotary
query/key part, R the rotary part, Dv value head size, C latent width.
"""

from __future__ import annotations

import torch
from torch import nn

from mha_course.attention.functions import attention_function
from mha_course.caches.base import Cache
from mha_course.families.config import FamilyConfig
from mha_course.families.layers import RMSNorm, attend, call_mask
from mha_course.families.scaled_rope import apply_scaled_rope


class LatentAttention(nn.Module):
    """DeepSeek V2/V3 attention. ``cache`` is a :class:`~mha_course.attention.mla.LatentKVCache`.
    ``impl`` and :attr:`dispatch` as :class:`~mha_course.families.layers.Attention`'s (the
    value head size Dv may differ from D + R: torch's SDPA takes that).

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """

    def __init__(self, config: FamilyConfig, layer: int, impl: str = "sdpa") -> None:
        super().__init__()
        c = config
        attention_function(impl)  # an unknown name is refused, naming the registry's
        self.impl = impl
        self.dispatch: tuple[str, str | None] | None = None  # (what ran last, why not impl)
        self.H, self.D, self.R, self.Dv, self.C = (
            c.n_head,
            c.head_dim,
            c.qk_rope_dim,
            c.v_head_dim,
            c.kv_lora_rank,
        )
        qk = self.D + self.R
        if c.q_lora_rank is None:
            self.q_proj = nn.Linear(c.n_embd, self.H * qk, bias=False)
            self.q_a = self.q_norm = self.q_b = None
        else:
            self.q_proj = None
            self.q_a = nn.Linear(c.n_embd, c.q_lora_rank, bias=c.qkv_bias)
            self.q_norm = RMSNorm(c.q_lora_rank)
            self.q_b = nn.Linear(c.q_lora_rank, self.H * qk, bias=False)
        self.kv_a = nn.Linear(c.n_embd, self.C + self.R, bias=c.qkv_bias)  # latent + shared key
        self.kv_norm = RMSNorm(self.C)
        self.kv_b = nn.Linear(self.C, self.H * (self.D + self.Dv), bias=False)
        self.o_proj = nn.Linear(self.H * self.Dv, c.n_embd, bias=c.out_bias)
        self.layout, self.base, self.scaling = c.rope_layout, c.rope_base, c.rope_scaling
        self.scale = c.attn_scale if c.attn_scale is not None else qk**-0.5

    def forward(
        self,
        x: torch.Tensor,
        cache: Cache | None = None,
        positions: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, L, _ = x.shape
        H, D, R, Dv = self.H, self.D, self.R, self.Dv
        offset = 0 if cache is None else cache.length
        q = self.q_proj(x) if self.q_proj is not None else self.q_b(self.q_norm(self.q_a(x)))
        q = q.view(B, L, H, D + R).transpose(1, 2)  # (B, L, H(D+R)) -> (B, H, L, D + R)
        q_nope, q_rot = q.split([D, R], dim=-1)
        latent, k_rot = self.kv_a(x).split([self.C, R], dim=-1)  # (B, L, C), (B, L, R)
        latent = self.kv_norm(latent)
        pos = torch.arange(offset, offset + L, device=x.device) if positions is None else positions
        q_rot = apply_scaled_rope(
            q_rot, pos, layout=self.layout, base=self.base, scaling=self.scaling
        )  # (B, H, L, R)
        k_rot = apply_scaled_rope(
            k_rot, pos, layout=self.layout, base=self.base, scaling=self.scaling
        )  # (B, L, R)
        if cache is not None:
            latent, k_rot = cache.update(latent, k_rot)  # (B, S, C), (B, S, R)
        S = latent.shape[1]
        kv = self.kv_b(latent).view(B, S, H, D + Dv).transpose(1, 2)  # (B, S, C) -> (B, H, S, D+Dv)
        k_nope, v = kv.split([D, Dv], dim=-1)
        k = torch.cat([k_nope, k_rot[:, None].expand(B, H, S, R)], dim=-1)  # (B, H, S, D + R)
        query = torch.cat([q_nope, q_rot], dim=-1)  # (B, H, L, D + R)
        mask, causal = call_mask(
            L, S, offset, keys, window=None, cache=cache, device=x.device
        )  # causal (and padding)
        out, self.dispatch = attend(
            query, k, v, mask, scale=self.scale, impl=self.impl, is_causal=causal
        )  # (B, H, L, Dv)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, H * Dv))  # (B, H, L, Dv) -> (B, L, E)

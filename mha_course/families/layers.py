"""Chapter 20: the pieces production families add around the course's attention.

RMSNorm (Llama, Qwen, Mistral, Gemma, DeepSeek), gated MLPs (SwiGLU, GeGLU), logit
soft-capping (Gemma 2), and one attention layer for grouped heads with any head size, optional
query/key norms and an optional sliding window — built on the course's
:func:`~mha_course.apply_rope`, masks and caches, with the attention function picked by name from
the one registry (:data:`~mha_course.attention.functions.ATTENTION_FUNCTIONS`, chapter 8's
``impl``): torch's fused ``sdpa`` by default, the course's ``eager`` where the family needs it
(Gemma 2's score cap) — :func:`attend` says which ran and why.

Letters: B batch, L new positions, S positions attended (cached + new), E width, H query
heads, G key/value heads, D head size, F MLP width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mha_course.attention.functions import ATTENTION_FUNCTIONS, attention_function
from mha_course.caches.base import Cache
from mha_course.caches.window import sliding_window_mask
from mha_course.families.config import FamilyConfig
from mha_course.families.scaled_rope import apply_scaled_rope
from mha_course.ops.masks import causal_mask


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * (offset + w)``: LayerNorm without centring or bias.

    Half-precision inputs are normalised in float32 (as every family's reference code does);
    float32 and float64 stay in their own precision. Gemma stores ``w`` and multiplies by
    ``1 + w`` (``offset=1``) before rounding back to the input's dtype; Llama and the others
    multiply by ``w`` (``offset=0``) after rounding — the orders their own code uses, which
    matter in bfloat16.

    Shape:
        x: (..., E). Returns (..., E).
    """

    def __init__(self, dim: int, eps: float = 1e-6, offset: float = 0.0) -> None:
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - offset))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., E)
        if self.offset:  # Gemma: (h * (1 + w)) rounded once
            return (h * (self.offset + self.weight.to(h.dtype))).to(x.dtype)
        return self.weight * h.to(x.dtype)  # Llama: h rounded, then scaled


def make_norm(config: FamilyConfig, dim: int | None = None) -> nn.Module:
    """The family's norm over ``dim`` features (default E)."""
    dim = config.n_embd if dim is None else dim
    if config.norm == "layernorm":
        return nn.LayerNorm(dim, eps=config.norm_eps)
    return RMSNorm(dim, config.norm_eps, config.norm_offset)


class MLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` for the gated kinds (SwiGLU: SiLU, GeGLU: tanh-GELU), or
    ``down(gelu_tanh(up(x)))`` for GPT-2 (no gate).

    Shape:
        x: (B, L, E) -> (B, L, F) -> (B, L, E).
    """

    def __init__(self, config: FamilyConfig) -> None:
        super().__init__()
        E, Fw, bias = config.n_embd, config.intermediate, config.mlp_bias
        self.kind = config.mlp
        self.gate = nn.Linear(E, Fw, bias=bias) if self.kind != "gelu_tanh" else None
        self.up = nn.Linear(E, Fw, bias=bias)
        self.down = nn.Linear(Fw, E, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return self.down(F.gelu(self.up(x), approximate="tanh"))
        act = F.silu if self.kind == "swiglu" else (lambda t: F.gelu(t, approximate="tanh"))
        return self.down(act(self.gate(x)) * self.up(x))


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap * tanh(x / cap)``: a smooth bound to (-cap, cap) (Gemma 2's logits and scores)."""
    return x if cap is None else cap * torch.tanh(x / cap)


def capped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    cap: float,
) -> torch.Tensor:
    """Attention whose scores are soft-capped before the mask and softmax (Gemma 2), written
    out eagerly: the (L, S) scores are materialised so the cap can bend them.

    Shape:
        q: (B, H, L, D); k: (B, G, S, D); v: (B, G, S, Dv); mask: bool broadcastable to
        (B, H, L, S), True = may attend. Returns (B, H, L, Dv).
    """
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)  # (B, G, S, D) -> (B, H, S, D): head h reads h // rep
    v = v.repeat_interleave(rep, dim=1)  # (B, G, S, Dv) -> (B, H, S, Dv)
    scores = softcap(q @ k.transpose(-2, -1) * scale, cap)  # (B, H, L, S)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, L, S) @ (B, H, S, Dv) -> (B, H, L, Dv)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    scale: float,
    impl: str = "sdpa",
    cap: float | None = None,
    is_causal: bool = False,
) -> tuple[torch.Tensor, tuple[str, str | None]]:
    """Attention by the registry's function ``impl``, and ``(what ran, why not impl or None)``
    as :attr:`MultiHeadAttention.dispatch <mha_course.MultiHeadAttention>` reports it.

    ``mask`` None with ``is_causal``: plain top-left causal attention (a prompt with no cache,
    no padding, no window), which fused kernels serve without building an (L, S) mask. A score
    ``cap`` (Gemma 2) runs eager: ``cap * tanh(scores / cap)`` bends the scores between the
    product and the softmax, and no fused kernel of the registry takes it (``transformers``
    runs Gemma 2 eager for the same reason). A mask the chosen function does not take runs
    eager too, saying why.

    Shape:
        q: (B, H, L, D); k: (B, G, S, D); v: (B, G, S, Dv); mask: bool broadcastable to
        (B, H, L, S), True = may attend, or None. Returns (B, H, L, Dv).
    """
    chosen = attention_function(impl)
    if cap is not None:
        if mask is None:
            raise ValueError("mask: a score cap runs eager, which needs the (L, S) mask; got None")
        why = None if impl == "eager" else f"{impl} takes no score cap (Gemma 2's soft-capping)"
        return capped_attention(q, k, v, mask, scale, cap), ("eager", why)
    why = chosen.why_not(attn_mask=mask, query=q)
    ran = ATTENTION_FUNCTIONS["eager"] if why is not None else chosen
    out = ran.run(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )  # (B, H, L, Dv)
    return out, (ran.name, why)


def call_mask(
    L: int,
    S: int,
    offset: int,
    keys: torch.Tensor | None,
    *,
    window: int | None,
    cap: float | None = None,
    **where: object,
) -> tuple[torch.Tensor | None, bool]:
    """The mask to hand :func:`attend`, as ``(mask, is_causal)``: ``(None, True)`` for a prompt
    that is plain causal (no cached keys, S = L, no window, no padding), ``(None, False)`` for
    one query that sees every key (a decoding step without padding), else :func:`layer_mask`'s.
    A fused kernel then runs without an (L, S) mask; a score ``cap`` always gets the mask.

    Shape:
        keys: bool (B, offset + L) or None; S: the keys attended (after the cache's update);
        ``where``: :func:`layer_mask`'s ``cache`` and ``device``. Returns a mask as :func:`layer_mask`'s, or None.
    """
    if cap is None and keys is None and window is None and offset == 0 and S == L:
        return None, True
    mask = layer_mask(L, offset, window, keys=keys, **where)
    if cap is None and keys is None and L == 1 and bool(mask.all()):
        return None, False
    return mask, False


def layer_mask(
    L: int,
    offset: int,
    window: int | None,
    cache: Cache | None,
    device,
    keys: torch.Tensor | None = None,
) -> torch.Tensor:
    """Which keys each new query sees: causal, and within ``window`` W if the layer is local,
    over all ``offset + L`` positions, and only the real (not padding) ``keys`` of each row;
    then the cache narrows it to the keys it returned
    (:meth:`~mha_course.caches.base.Cache.restrict_mask`: a ring-buffer cache keeps only the last W).
    A padding query that would see no key at all sees every key instead (its output is never
    read; an all-masked row would give NaN, and NaN times a zero weight is still NaN).

    Shape:
        keys: bool (B, offset + L), True = a real token, or None. Returns bool (L, S_kept), or
        (B, 1, L, S_kept) with ``keys``; True = may attend.
    """
    S = offset + L
    if window is None:
        mask = causal_mask(L, S, offset=offset, device=device)
    else:
        mask = sliding_window_mask(L, S, window=window, offset=offset, device=device)
    if keys is not None:
        mask = mask & keys[:, None, None, :]  # (L, S) & (B, 1, 1, S) -> (B, 1, L, S)
    mask = mask if cache is None else cache.restrict_mask(mask, L)
    if keys is not None:
        mask = mask | ~mask.any(-1, keepdim=True)  # an all-padding row: any finite output
    return mask


class Attention(nn.Module):
    """Causal self-attention with H query heads, G key/value heads of size D (any D), optional
    RoPE, query/key RMSNorm over D (Qwen 3), a sliding window and a score cap.

    ``positions`` (B, L) are the rotary positions (default ``cache.length`` onwards for every
    row); ``keys`` (B, S) marks the real tokens of a padded batch (see :func:`layer_mask`).
    ``impl`` names the registry's attention function (:func:`attend`); :attr:`dispatch` says
    which ran in the last call and why ``impl`` did not, as ``MultiHeadAttention.dispatch``.

    Shape:
        x: (B, L, E), L new positions after ``cache.length`` cached ones. Returns (B, L, E).
    """

    def __init__(self, config: FamilyConfig, layer: int, impl: str = "sdpa") -> None:
        super().__init__()
        c = config
        attention_function(impl)  # an unknown name is refused, naming the registry's
        self.impl = impl
        self.dispatch: tuple[str, str | None] | None = None  # (what ran last, why not impl)
        self.H, self.G, self.D = c.n_head, c.n_kv_head, c.head_dim
        self.q_proj = nn.Linear(c.n_embd, self.H * self.D, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.n_embd, self.G * self.D, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.n_embd, self.G * self.D, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.H * self.D, c.n_embd, bias=c.out_bias)
        self.span = c.qk_norm_span  # "head": over D per head (Qwen 3, Gemma 3); "all": H*D (OLMo 2)
        q_dim, k_dim = (
            (self.D, self.D) if self.span == "head" else (self.H * self.D, self.G * self.D)
        )
        self.q_norm = RMSNorm(q_dim, c.norm_eps, c.norm_offset) if c.qk_norm else None
        self.k_norm = RMSNorm(k_dim, c.norm_eps, c.norm_offset) if c.qk_norm else None
        self.rope = c.positions == "rope"
        self.layout, self.base, self.scaling = c.rope_layout, c.rope_base, c.rope_scaling
        self.window = c.windows[layer]
        if self.window is not None and c.local_rope_base is not None:  # Gemma 3's local layers
            self.base, self.scaling = c.local_rope_base, None
        self.scale = c.attn_scale if c.attn_scale is not None else self.D**-0.5
        self.cap = c.attn_softcap

    def forward(
        self,
        x: torch.Tensor,
        cache: Cache | None = None,
        positions: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, L, _ = x.shape
        offset = 0 if cache is None else cache.length
        q, k = self.q_proj(x), self.k_proj(x)  # (B, L, H * D), (B, L, G * D)
        if self.q_norm is not None and self.span == "all":  # OLMo 2: over all heads at once
            q, k = self.q_norm(q), self.k_norm(k)
        # (B, L, heads * D) -> (B, L, heads, D) -> (B, heads, L, D)
        q = q.view(B, L, self.H, self.D).transpose(1, 2)
        k = k.view(B, L, self.G, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.G, self.D).transpose(1, 2)
        if self.q_norm is not None and self.span == "head":  # Qwen 3: each head's, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            pos = (
                torch.arange(offset, offset + L, device=x.device)
                if positions is None
                else positions
            )
            q = apply_scaled_rope(q, pos, layout=self.layout, base=self.base, scaling=self.scaling)
            k = apply_scaled_rope(k, pos, layout=self.layout, base=self.base, scaling=self.scaling)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, G, L, D) -> (B, G, S, D)
        mask, causal = call_mask(
            L,
            k.shape[2],
            offset,
            keys,
            window=self.window,
            cap=self.cap,
            cache=cache,
            device=x.device,
        )
        out, self.dispatch = attend(
            q, k, v, mask, scale=self.scale, impl=self.impl, cap=self.cap, is_causal=causal
        )  # (B, H, L, D)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, self.H * self.D))  # -> (B, L, E)

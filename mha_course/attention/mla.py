"""Chapter 15: fewer bytes per token — multi-head latent attention (MLA, DeepSeek-V2).

Keys and values of every head are reconstructed from one shared latent ``c`` of C features
per token; the cache holds only ``c`` and a small rotary key of R features shared by all
heads (the *decoupled* RoPE part: a rotation between the latent and the up-projection would
stop the up-projection from being folded away). At inference the up-projections are folded
into the query and output projections (the *absorbed* form), so attention runs directly on
the cached latents: MQA with one wide key/value head.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mha_course._checks import (
    check_base,
    check_float,
    check_positive_int,
    check_rank,
    check_shape,
    check_size,
    check_tensor,
)
from mha_course.attention.heads import merge_heads, split_heads
from mha_course.caches.base import Cache, check_new_kv
from mha_course.ops.masks import causal_mask
from mha_course.ops.rope import apply_rope
from mha_course.ops.sdpa import scaled_dot_product_attention


class LatentKVCache(Cache):
    """MLA's cache: the latent and the rotated shared key of every token seen so far. Follows
    :class:`mha_course.caches.base.Cache`, with the two streams of MLA in place of keys and values:
    ``update(latent, rope_key)``.

    Shape:
        latent: (B, S, C); rope_key: (B, S, R).
    """

    def __init__(self) -> None:
        self.latent: torch.Tensor | None = None
        self.rope_key: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.latent = self.rope_key = None

    @property
    def length(self) -> int:
        """Number of cached positions S (0 when empty)."""
        return 0 if self.latent is None else self.latent.shape[1]

    def held(self) -> tuple[torch.Tensor, ...]:
        """The cached latents (B, S, C) and rotary keys (B, S, R)."""
        return () if self.latent is None else (self.latent, self.rope_key)

    def update(
        self, latent: torch.Tensor, rope_key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append and return everything cached.

        Shape:
            latent: (B, S_new, C), rope_key: (B, S_new, R) -> (B, S, C), (B, S, R).
        """
        check_new_kv(
            latent,
            rope_key,
            None if self.latent is None else (self.latent, self.rope_key),
            names=("latent", "rope_key"),
            letters=("(B, S, C)", "(B, S, R)"),
        )
        if self.latent is not None:
            latent = torch.cat(
                [self.latent, latent], dim=1
            )  # (B, S_old, C) + (B, S_new, C) -> (B, S, C)
            rope_key = torch.cat([self.rope_key, rope_key], dim=1)  # same, last size R
        self.latent, self.rope_key = latent, rope_key
        return latent, rope_key


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention with DeepSeek-V2's low-rank key/value compression.

    Per token: ``c = W_DKV x`` (C features, cached), ``k_R = RoPE(W_KR x)`` (R features,
    cached, shared by the heads); head ``h`` reads keys ``[W_UK,h c ; k_R]`` and values
    ``W_UV,h c``; its query is ``[W_UQ,h c_Q ; RoPE(W_QR,h c_Q)]`` with ``c_Q = W_DQ x``
    (or ``x`` when ``q_latent_dim`` is None). Scores are scaled by ``1/sqrt(D + R)``.
    No biases (they would not fold) and no latent normalisation (DeepSeek adds RMSNorm there).

    Args:
        embed_dim: E. num_heads: H. latent_dim: C (the cached width).
        rope_dim: R, even (0 = no rotary part). head_dim: D (default E / H).
        q_latent_dim: C_Q for low-rank queries, or None for full-rank ones.

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        latent_dim: int,
        rope_dim: int = 0,
        head_dim: int | None = None,
        q_latent_dim: int | None = None,
        rope_base: float = 10000.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim, "E")
        check_positive_int("num_heads", num_heads, "H")
        check_positive_int("latent_dim", latent_dim, "C")
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"num_heads: the default head_dim D = E / H needs H to divide E; "
                    f"got E={embed_dim}, H={num_heads} (or pass head_dim)"
                )
            head_dim = embed_dim // num_heads
        check_positive_int("head_dim", head_dim, "D")
        if latent_dim > embed_dim:
            raise ValueError(
                f"latent_dim: expected C <= embed_dim E = {embed_dim} (the latent W_DKV x is "
                f"a projection of x: a wider one holds no more and caches more), got {latent_dim}"
            )
        if (
            isinstance(rope_dim, bool)
            or not isinstance(rope_dim, int)
            or rope_dim < 0
            or rope_dim % 2
        ):
            raise ValueError(
                f"rope_dim: expected an even int R >= 0 (RoPE rotates pairs), got {rope_dim!r}"
            )
        if q_latent_dim is not None:
            check_positive_int("q_latent_dim", q_latent_dim, "C_Q (or None)")
        check_base("rope_base", rope_base)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.latent_dim, self.rope_dim, self.q_latent_dim = latent_dim, rope_dim, q_latent_dim
        self.rope_base = float(rope_base)
        H, D, R, C = num_heads, head_dim, rope_dim, latent_dim
        f = {"device": device, "dtype": dtype, "bias": False}
        q_in = embed_dim if q_latent_dim is None else q_latent_dim
        self.q_down = (
            None if q_latent_dim is None else nn.Linear(embed_dim, q_latent_dim, **f)
        )  # W_DQ
        self.q_up = nn.Linear(q_in, H * D, **f)  # W_UQ
        self.q_rope = nn.Linear(q_in, H * R, **f) if R else None  # W_QR
        self.kv_down = nn.Linear(embed_dim, C, **f)  # W_DKV
        self.k_up = nn.Linear(C, H * D, **f)  # W_UK
        self.v_up = nn.Linear(C, H * D, **f)  # W_UV
        self.k_rope = nn.Linear(embed_dim, R, **f) if R else None  # W_KR
        self.out_proj = nn.Linear(H * D, embed_dim, **f)  # W_O

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"latent_dim={self.latent_dim}, rope_dim={self.rope_dim}, q_latent_dim={self.q_latent_dim}"
        )

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The folded matrices: ``W_UK,hᵀ W_UQ,h`` (query input -> latent space) and
        ``W_O,h W_UV,h`` (latent space -> output), per head.

        Shape:
            Returns (H, C, C_Q or E) and (E, H, C).
        """
        H, D, C = self.num_heads, self.head_dim, self.latent_dim
        w_uq = self.q_up.weight.view(H, D, -1)  # (H*D, C_Q) -> (H, D, C_Q)
        w_uk = self.k_up.weight.view(H, D, C)  # (H*D, C) -> (H, D, C)
        w_uv = self.v_up.weight.view(H, D, C)  # (H*D, C) -> (H, D, C)
        w_o = self.out_proj.weight.view(self.embed_dim, H, D)  # (E, H*D) -> (E, H, D)
        w_q = torch.einsum("hdc,hdq->hcq", w_uk, w_uq)  # (H, C, C_Q)
        w_ov = torch.einsum("ehd,hdc->ehc", w_o, w_uv)  # (E, H, C)
        return w_q, w_ov

    def _check_absorbed(self, weights: object) -> None:
        """``weights`` must be what :meth:`absorbed_weights` returns for this module's sizes."""
        if not isinstance(weights, (tuple, list)) or len(weights) != 2:
            raise ValueError(
                f"weights: expected the pair (w_q, w_ov) of absorbed_weights(), got "
                f"{type(weights).__name__}"
            )
        H, C, E = self.num_heads, self.latent_dim, self.embed_dim
        q_in = E if self.q_latent_dim is None else self.q_latent_dim
        check_shape("weights[0]", weights[0], (H, C, q_in), "(H, C, C_Q or E)")
        check_shape("weights[1]", weights[1], (E, H, C), "(E, H, C)")

    def forward(
        self,
        x: torch.Tensor,
        *,
        kv_cache: LatentKVCache | None = None,
        absorbed: bool = False,
        weights: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Causal self-attention; ``absorbed=True`` runs on the latents with the folded weights
        (pass ``weights=module.absorbed_weights()`` to fold once for many decode steps).

        Shape:
            x: (B, L, E). Returns (B, L, E).
        """
        check_tensor("x", x)
        check_float("x", x)
        check_rank("x", x, "(B, L, E)", rank=3)
        check_size("x", x, -1, self.embed_dim, "(B, L, E)", "E")
        if weights is not None:
            self._check_absorbed(weights)
        B, L, _ = x.shape
        H, R = self.num_heads, self.rope_dim
        offset = 0 if kv_cache is None else kv_cache.length
        pos = torch.arange(offset, offset + L, device=x.device)  # (L,) absolute positions
        c = self.kv_down(x)  # (B, L, E) -> (B, L, C)
        k_r = x.new_zeros(B, L, 0)
        if R:
            k_r = apply_rope(self.k_rope(x)[:, None], pos, base=self.rope_base)[
                :, 0
            ]  # (B, 1, L, R) -> (B, L, R)
        if kv_cache is not None:
            c, k_r = kv_cache.update(c, k_r)  # -> (B, S, C), (B, S, R)
        S = c.shape[1]
        c_q = x if self.q_down is None else self.q_down(x)  # (B, L, C_Q or E)
        q_r = x.new_zeros(B, H, L, 0)
        if R:
            q_r = apply_rope(
                split_heads(self.q_rope(c_q), H), pos, base=self.rope_base
            )  # (B, L, H*R) -> (B, H, L, R)
        mask = causal_mask(L, S, offset=offset, device=x.device)  # (L, S)
        scale = 1.0 / math.sqrt(self.head_dim + R)
        if not absorbed:
            q = torch.cat(
                [split_heads(self.q_up(c_q), H), q_r], dim=-1
            )  # (B, H, L, D) + (B, H, L, R) -> (B, H, L, D+R)
            k_c = split_heads(self.k_up(c), H)  # (B, S, H*D) -> (B, H, S, D)
            k = torch.cat([k_c, k_r[:, None].expand(B, H, S, R)], dim=-1)  # (B, H, S, D+R)
            v = split_heads(self.v_up(c), H)  # (B, S, H*D) -> (B, H, S, D)
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)  # (B, H, L, D)
            return self.out_proj(merge_heads(out))  # (B, H, L, D) -> (B, L, H*D) -> (B, L, E)
        w_q, w_ov = self.absorbed_weights() if weights is None else weights
        q_lat = torch.einsum("blq,hcq->bhlc", c_q, w_q)  # (B, L, C_Q) -> (B, H, L, C)
        # One key/value head shared by all H query heads: stack the heads as H * L query rows of
        # that single head, so every cached latent is read once for all of them.
        q = torch.cat([q_lat, q_r], dim=-1).reshape(
            B, 1, H * L, -1
        )  # (B, H, L, C+R) -> (B, 1, H*L, C+R)
        k = torch.cat([c, k_r], dim=-1)[:, None]  # (B, S, C+R) -> (B, 1, S, C+R)
        v = c[:, None]  # (B, S, C) -> (B, 1, S, C)
        out = scaled_dot_product_attention(
            q, k, v, attn_mask=mask.repeat(H, 1), scale=scale
        )  # (B, 1, H*L, C)
        out = out.view(B, H, L, -1)  # (B, 1, H*L, C) -> (B, H, L, C)
        return torch.einsum("bhlc,ehc->ble", out, w_ov)  # (B, H, L, C) -> (B, L, E)

"""Chapters 4–7: multi-head attention with grouped key/value heads (MHA, GQA, MQA),
self- and cross-attention, masks, a KV cache, and two interchangeable kernels; chapter 12 adds
positions inside attention (RoPE, ALiBi).

Dimension letters, one per dimension: B batch, L query length, S key/value length, E embed_dim,
H query heads, G key/value heads, D head_dim (E = H * D).

How ``q_proj`` relates to chapter 3's ``W_Q``: ``q_proj`` is the H heads' query projections side by
side. Head ``h``'s own (E -> D) matrix, chapter 3's ``SelfAttentionHead.W_Q`` for that head, is the
slice ``q_proj.weight[h * D:(h + 1) * D]`` (rows, because ``nn.Linear`` stores (out, in) and computes
``x @ weight.T``); ``split_heads`` (``attention/heads.py``) cuts the projected features at the same
boundaries. The same holds for ``k_proj``/``v_proj`` (W_K, W_V, with G heads) and ``out_proj`` is W_O.

Beside it: ``attention/inputs.py`` checks a call's inputs and builds its one mask,
``attention/dispatch.py`` runs the chosen attention function (or eager, and says why), and
``attention/from_torch.py`` copies ``torch.nn.MultiheadAttention``'s weights."""

from __future__ import annotations

import torch
from torch import nn

from mha_course._checks import check_base, check_kv_heads
from mha_course.attention.dispatch import run_attention
from mha_course.attention.from_torch import from_torch_module
from mha_course.attention.functions import ATTENTION_FUNCTIONS
from mha_course.attention.heads import (  # noqa: F401 - split_heads: mha.py's name before its split
    _merge,
    _split,
    merge_heads,
    split_heads,
)
from mha_course.attention.inputs import add_alibi, build_mask, check_inputs, head_multipliers
from mha_course.caches.base import Cache
from mha_course.ops.positions import alibi_slopes
from mha_course.ops.rope import LAYOUTS as ROPE_LAYOUTS
from mha_course.ops.rope import apply_rope

IMPLS = tuple(ATTENTION_FUNCTIONS)  # "eager", "sdpa", "tiled", "flash", "triton", "flex"


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch first, with H query heads and G key/value heads.

    ``num_kv_heads=None`` (G = H) is classic MHA, ``1`` is multi-query attention (MQA), and
    any divisor of ``num_heads`` is grouped-query attention (GQA): query head ``h`` reads
    key/value head ``h // (H // G)``.

    Args:
        embed_dim: E, the model width; ``head_dim`` D = E / H.
        num_heads: H query heads.
        num_kv_heads: G key/value heads (default H).
        bias: biases in all four projections.
        dropout: dropout on the attention weights while training.
        kdim, vdim: feature sizes of ``key``/``value`` inputs for cross-attention (default E).
        impl: which attention function runs, by name from the one registry
            (:data:`mha_course.attention.functions.ATTENTION_FUNCTIONS`): ``"eager"`` the course's
            own :func:`scaled_dot_product_attention`, ``"sdpa"`` torch's fused kernel, ``"tiled"``,
            ``"flash"``, ``"triton"``, ``"flex"`` the course's kernels and FlexAttention. They agree
            to rounding. A call the chosen function cannot serve (a mask it does not take,
            dropout, ``need_weights``) runs ``"eager"``; :attr:`dispatch` says which ran and why.
        rope: ``None`` (no rotary embedding), ``"half"`` or ``"interleaved"``: rotate queries
            and keys by their positions after the head split (:func:`mha_course.apply_rope`).
            With a ``kv_cache`` the new tokens' positions start at the cache length, and keys
            are cached already rotated. Meant for self-attention (queries and keys share
            positions).
        rope_base: RoPE's ``base`` (``theta_i = base^(-2i/D)``).
        alibi: add ALiBi's bias ``-slope_h * |i - j|`` to the scores (slopes in the buffer
            ``alibi_slopes``, (H,)); with a ``kv_cache`` query positions are offset too.

    Shape:
        query: (B, L, E); key: (B, S, kdim); value: (B, S, vdim). Output: (B, L, E);
        weights (need_weights=True): (B, H, L, S).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        kdim: int | None = None,
        vdim: int | None = None,
        impl: str = "sdpa",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        rope: str | None = None,
        rope_base: float = 10000.0,
        alibi: bool = False,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if embed_dim <= 0 or num_heads <= 0 or num_kv_heads <= 0:
            raise ValueError(
                f"embed_dim, num_heads, num_kv_heads: expected positive integers, got "
                f"E={embed_dim}, H={num_heads}, G={num_kv_heads}"
            )
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim: E must be divisible by num_heads H so each head gets D = E / H "
                f"features; got E={embed_dim}, H={num_heads}"
            )
        check_kv_heads("num_kv_heads", num_heads, num_kv_heads)
        if impl not in IMPLS:
            raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout, self.impl = dropout, impl
        # (the function that ran in the last forward, why the chosen one did not, or None)
        self.dispatch: tuple[str, str | None] | None = None
        if rope is not None and rope not in ROPE_LAYOUTS:
            raise ValueError(f"rope: expected None or one of {ROPE_LAYOUTS}, got {rope!r}")
        if rope is not None and self.head_dim % 2:
            raise ValueError(
                f"rope: RoPE rotates pairs of features, so head_dim D = E / H must be even; "
                f"got D = {self.head_dim} (E={embed_dim}, H={num_heads})"
            )
        check_base("rope_base", rope_base)
        if not isinstance(alibi, bool):
            raise ValueError(f"alibi: expected True or False, got {alibi!r}")
        self.rope, self.rope_base, self.alibi = rope, float(rope_base), alibi
        self.alibi_slopes: torch.Tensor | None
        self.register_buffer(
            "alibi_slopes", alibi_slopes(num_heads).to(device) if alibi else None, persistent=False
        )
        kv_width = num_kv_heads * self.head_dim  # G * D
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W_Q
        self.k_proj = nn.Linear(self.kdim, kv_width, bias=bias, **factory)  # W_K
        self.v_proj = nn.Linear(self.vdim, kv_width, bias=bias, **factory)  # W_V
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W_O

    def extra_repr(self) -> str:
        extra = (f", rope={self.rope!r}" if self.rope else "") + (
            ", alibi=True" if self.alibi else ""
        )
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, impl={self.impl!r}"
            + extra
        )

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, impl: str = "sdpa") -> MultiHeadAttention:
        """An equivalent module with the weights of a ``torch.nn.MultiheadAttention`` (packed or
        separate in-projections, with or without bias, any kdim/vdim). ``add_bias_kv`` and
        ``add_zero_attn`` have no counterpart here and raise ``ValueError``.

        The copy is always batch-first ``(B, L, E)``; for a module with ``batch_first=False`` give
        it ``x.transpose(0, 1)``. Mind the opposite mask conventions: torch's bool ``attn_mask``
        is True where attention is NOT allowed, ours (and SDPA's) True where it MAY attend —
        convert with :func:`mha_course.torch_mha_mask_to_sdpa`; ``key_padding_mask`` means the
        same in both (True = padding). ``need_weights=True`` returns per-head weights
        ``(B, H, L, S)``: their mean over H is torch's default (averaged) output.
        """
        return from_torch_module(cls, module, impl)

    # ---- forward -------------------------------------------------------------------------
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        kv_cache: Cache | None = None,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Args:
            attn_mask: bool True = may attend, or float added to the scores; (L, S),
                (B, L, S) or (B, H, L, S), where S counts cached positions too.
            key_padding_mask: (B, S), True = padding (ignored key), or float (added to the
                scores); S counts cached positions too.
            is_causal: query ``i`` sees keys up to its own position; with a ``kv_cache`` the
                mask is offset by the number of cached positions.
            need_weights: also return the per-head weights (runs the eager path).
            kv_cache: any :class:`mha_course.caches.base.Cache` (:class:`mha_course.KVCache`, a static,
                sliding-window, quantized or paged-sequence cache); this call's keys/values are
                given to its ``update`` first. ``length`` (tokens seen) offsets the positions, and
                its ``restrict_mask`` narrows the mask to the keys it returned (chapter 14's
                :class:`mha_course.SlidingWindowCache` keeps only some positions).
            head_mask: (H,) or (B, H) multipliers on each head's output (0 switches a head off).

        Shape:
            query: (B, L, E); key: (B, S, kdim); value: (B, S, vdim).
            Returns output (B, L, E) and weights (B, H, L, S) or None.
        """
        key = query if key is None else key
        value = key if value is None else value
        widths = (self.embed_dim, self.kdim, self.vdim)
        check_inputs(query, key, value, widths, self.q_proj.weight.dtype)
        if (
            kv_cache is not None
            and query.shape[1] == 1
            and key is query
            and value is query
            and attn_mask is None
            and key_padding_mask is None
            and head_mask is None
            and not need_weights
            and self.takes_plain_step(kv_cache)
        ):  # a plain decode step: one new query sees every key, so no mask to build or narrow
            return self.decode_step(query, kv_cache), None
        B, L, _ = query.shape
        H, G = self.num_heads, self.num_kv_heads
        offset = 0 if kv_cache is None else kv_cache.length  # positions cached before this call
        S = offset + key.shape[1]
        # the keys the cache will return (None: all S, in order): masks are built at that size
        positions = None if kv_cache is None else kv_cache.mask_positions(key.shape[1])
        # Check (and build) every mask before the cache grows: a bad call leaves the cache as it was.
        dtype, dev = query.dtype, query.device
        mask = build_mask(
            attn_mask, key_padding_mask, is_causal, (B, H, L, S), offset, dtype, dev, positions
        )  # (B, H, L, S_read), or None
        if self.alibi:  # + (H, L, S_read) bias on the scores
            mask = add_alibi(mask, self.alibi_slopes, L, S, offset, dtype, dev, positions)
        multipliers = None if head_mask is None else head_multipliers(head_mask, B, H, dtype)

        q = _split(self.q_proj(query), H)  # (B, L, E) -> (B, H, L, D)
        k = _split(self.k_proj(key), G)  # (B, S_new, kdim) -> (B, G, S_new, D)
        v = _split(self.v_proj(value), G)  # (B, S_new, vdim) -> (B, G, S_new, D)
        if self.rope is not None:  # rotate by absolute position; the cache holds rotated keys
            q = apply_rope(
                q,
                torch.arange(offset, offset + L, device=dev),
                layout=self.rope,
                base=self.rope_base,
            )  # (B, H, L, D)
            k = apply_rope(
                k, torch.arange(offset, S, device=dev), layout=self.rope, base=self.rope_base
            )  # (B, G, S_new, D)
        restricted = False
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, G, S_new, D) -> (B, G, S_old + S_new, D)
            # chapter 14: a cache that drops tokens narrows the mask to (..., L, S_kept)
            narrowed = kv_cache.restrict_mask(mask, L)  # the same object when it keeps all
            restricted, mask = narrowed is not mask, narrowed

        only_causal = (
            is_causal
            and offset == 0
            and attn_mask is None
            and key_padding_mask is None
            and not self.alibi
            and not restricted
        )  # SDPA's top-left causal, nothing else
        p = self.dropout if self.training else 0.0
        out, weights, self.dispatch = run_attention(
            self.impl,
            q,
            k,
            v,
            mask=mask,
            only_causal=only_causal,
            dropout_p=p,
            need_weights=need_weights,
        )  # out (B, H, L, D), weights (B, H, L, S) or None
        if multipliers is not None:  # head h scaled by head_mask[h]
            out = out * multipliers  # (B, H, L, D) * (1 or B, H, 1, 1)
        output = self.out_proj(merge_heads(out))  # (B, H, L, D) -> (B, L, H*D) -> (B, L, E)
        return output, (weights if need_weights else None)

    def takes_plain_step(self, kv_cache: Cache) -> bool:
        """Whether one new position with this cache may take :meth:`decode_step`: evaluation, no
        positions inside attention (RoPE, ALiBi), torch's SDPA, and a cache that keeps every key
        (its ``restrict_mask`` is the base class's)."""
        return (
            not (self.training or self.alibi)
            and self.rope is None
            and self.impl == "sdpa"
            and type(kv_cache).restrict_mask is Cache.restrict_mask
        )

    def decode_step(self, x: torch.Tensor, kv_cache: Cache) -> torch.Tensor:
        """``forward``'s own result for one new position of self-attention with a cache, no
        masks, no positions in attention, torch's SDPA: the same steps, none of the branches.
        Unchecked: for a caller that made sure of :meth:`takes_plain_step` (``forward`` and
        ``GPT.decode_step`` do).

        Shape:
            x: (B, 1, E). Returns (B, 1, E).
        """
        H, G = self.num_heads, self.num_kv_heads
        q = _split(self.q_proj(x), H)  # (B, 1, E) -> (B, H, 1, D)
        k, v = kv_cache.update(_split(self.k_proj(x), G), _split(self.v_proj(x), G))
        out = ATTENTION_FUNCTIONS["sdpa"].run(q, k, v, enable_gqa=G != H)  # (B, H, 1, D)
        if self.dispatch != ("sdpa", None):  # nn.Module's __setattr__ is slow: set on change
            self.dispatch = ("sdpa", None)
        return self.out_proj(_merge(out))  # (B, H, 1, D) -> (B, 1, E)

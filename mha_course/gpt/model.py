"""Chapter 13: a decoder-only Transformer (a small GPT) built from the course's own modules.

Token embedding (+ learned positions, or RoPE inside attention), ``n_layer`` pre-norm blocks
— ``x + dropout(attention(LayerNorm(x)))`` then ``x + dropout(MLP(LayerNorm(x)))`` — a final
LayerNorm and a read-out that shares the embedding matrix (weight tying). The attention is
:class:`mha_course.MultiHeadAttention` (MHA, GQA or MQA through ``n_kv_head``), causal, with
one :class:`mha_course.KVCache` per layer for generation — or, with ``attention="mla"``,
chapter 15's :class:`mha_course.attention.mla.MultiHeadLatentAttention` with one
:class:`~mha_course.attention.mla.LatentKVCache` per layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mha_course._checks import check_rank, check_tensor, shape_str
from mha_course.attention.mha import MultiHeadAttention
from mha_course.attention.mla import LatentKVCache, MultiHeadLatentAttention
from mha_course.caches.base import Cache
from mha_course.caches.dense import KVCache
from mha_course.caches.static import StaticKVCache
from mha_course.gpt.config import GPTConfig
from mha_course.ops.positions import LearnedPositionEmbedding


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(E, 4E) -> GELU -> Linear(4E, E) -> dropout.

    Shape:
        x: (B, T, E). Returns (B, T, E).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        width = config.mlp_ratio * config.n_embd
        self.fc = nn.Linear(config.n_embd, width, bias=config.bias)
        self.proj = nn.Linear(width, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(F.gelu(self.fc(x)))  # (B, T, E) -> (B, T, 4E) -> (B, T, E)
        return self.dropout(h) if self.training else h  # eval: dropout is the identity


def make_attention(config: GPTConfig) -> MultiHeadAttention | MultiHeadLatentAttention:
    """The block's causal self-attention; ``dropout`` acts on the attention weights."""
    if config.attention == "mla":  # chapter 15: one cached latent of C features per token
        return MultiHeadLatentAttention(
            config.n_embd,
            config.n_head,
            config.kv_latent_dim,
            rope_dim=config.rope_dim,
            rope_base=config.rope_base,
        )
    kwargs = {}
    if config.positions == "rope":  # chapter 12: rotate q and k after the head split
        kwargs = {"rope": config.rope_layout, "rope_base": config.rope_base}
    return MultiHeadAttention(
        config.n_embd,
        config.n_head,
        num_kv_heads=config.n_kv_head,
        bias=config.bias,
        dropout=config.dropout,
        impl=config.impl,
        **kwargs,
    )


class Block(nn.Module):
    """Pre-norm block: ``x + drop(attn(ln_1(x)))``, then ``x + mlp(ln_2(x))``.

    Shape:
        x: (B, L, E), L new positions (after any cached ones). Returns (B, L, E).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = make_attention(config)
        self.resid_dropout = nn.Dropout(config.dropout)  # on what attention adds to the stream
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: Cache | None = None,
        head_mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ):
        """Returns x (B, L, E), or with ``need_weights`` (x, weights (B, H, L, S))."""
        if isinstance(self.attn, MultiHeadLatentAttention):  # always causal; no weights/mask
            if head_mask is not None or need_weights:
                raise ValueError("head_mask, need_weights: not supported with attention='mla'")
            a, w = self.attn(self.ln_1(x), kv_cache=kv_cache), None
        else:
            a, w = self.attn(
                self.ln_1(x),
                is_causal=True,
                kv_cache=kv_cache,
                head_mask=head_mask,
                need_weights=need_weights,
            )
        x = x + (self.resid_dropout(a) if self.training else a)  # dropout: training only
        x = x + self.mlp(self.ln_2(x))
        return (x, w) if need_weights else x


class GPT(nn.Module):
    """A decoder-only language model: ids in, next-token logits out.

    ``forward(ids, caches=None, head_mask=None)``. With ``caches`` (one :class:`KVCache` per
    layer, from :meth:`new_caches`) each call appends its positions' keys/values, and learned
    positions continue after the cached ones — so a prompt, then one id at a time, gives the
    logits of one call on the whole sequence. ``head_mask[i]`` ((H,) or (B, H) multipliers)
    goes to layer ``i``'s attention (chapter 10's pruning uses it).

    Shape:
        ids: (B, L) int64 with cached + L <= context_length. Returns logits (B, L, V).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        E = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, E)
        self.wpe = (
            LearnedPositionEmbedding(config.context_length, E)  # chapter 12
            if config.positions == "learned"
            else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(E, bias=config.bias)
        self.lm_head = nn.Linear(E, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight  # one (V, E) matrix reads tokens in and out
        self.apply(_init_weights)
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer)
            for proj in (block.attn.out_proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def new_caches(self, static: bool = False) -> list[Cache]:
        """One empty cache per layer: :class:`KVCache` (grows by concatenation), or with
        ``static`` a :class:`~mha_course.caches.static.StaticKVCache` of ``context_length``;
        with ``attention="mla"`` a :class:`~mha_course.attention.mla.LatentKVCache` (no static form)."""
        if self.config.attention == "mla":
            if static:
                raise ValueError("static: attention='mla' has no static cache; use static=False")
            return [LatentKVCache() for _ in range(self.config.n_layer)]
        if static:
            return [StaticKVCache(self.config.context_length) for _ in range(self.config.n_layer)]
        return [KVCache() for _ in range(self.config.n_layer)]

    def num_parameters(self) -> int:
        """Scalar parameters, a tied matrix counted once."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        ids: torch.Tensor,
        caches: Sequence[Cache] | None = None,
        head_mask: torch.Tensor | Sequence[torch.Tensor] | None = None,
        need_weights: bool = False,
    ):
        """Logits for every position of ``ids`` (continuing after the cached positions).

        With ``need_weights`` also every layer's attention weights (the eager path).

        Shape:
            ids: (B, L). Returns logits (B, L, V), or (logits, [weights (B, H, L, S)] * n_layer).
        """
        check_tensor("ids", ids)
        check_rank("ids", ids, "(B, L)", rank=2)
        if ids.dtype != torch.long:
            raise ValueError(f"ids: expected int64 token ids of shape (B, L), got {ids.dtype}")
        V = self.config.vocab_size
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
            raise ValueError(
                f"ids: expected token ids in [0, vocab_size) = [0, {V}), got min "
                f"{int(ids.min())}, max {int(ids.max())}"
            )
        n = self.config.n_layer
        if caches is not None and len(caches) != n:
            raise ValueError(f"caches: expected {n} caches (one per layer), got {len(caches)}")
        if head_mask is not None and len(head_mask) != n:
            raise ValueError(f"head_mask: expected one entry per layer ({n}), got {len(head_mask)}")
        start = 0 if caches is None else caches[0].length  # positions already cached
        if self.wpe is not None and start + ids.shape[1] > self.config.context_length:
            raise ValueError(
                f"ids: expected at most context_length = {self.config.context_length} "
                f"positions in all, got {start} cached + {shape_str(ids)}"
            )
        return self._run(ids, caches, head_mask, need_weights, start)

    def takes_plain_steps(self, caches: Sequence[Cache]) -> bool:
        """Whether one new position may go through :meth:`decode_step` with ``plain=True``: learned
        positions, and every layer's attention takes the plain step with its cache
        (:meth:`MultiHeadAttention.takes_plain_step`: evaluation, torch's SDPA, a cache that keeps
        every key). Nothing here changes from one step to the next: asked once per generation."""
        return (
            self.config.attention != "mla"
            and self.wpe is not None
            and all(b.attn.takes_plain_step(c) for b, c in zip(self.blocks, caches))
        )

    def decode_step(
        self, ids: torch.Tensor, caches: Sequence[Cache], plain: bool = False
    ) -> torch.Tensor:
        """``forward(ids, caches)`` without its checks of ``ids`` and ``caches``, under
        ``torch.no_grad()``: for a caller that made the checked call first and guarantees the
        rest — :func:`generate`, whose ids are the model's own samples (in range) and which
        slides its window before ``block_size``. One decode step of this small model is mostly
        Python: the checks were a fifth of it, and the branches of ``Block.forward`` and
        ``MultiHeadAttention.forward`` another tenth. So with ``plain`` (the caller asked
        :meth:`takes_plain_steps`) one new position goes straight through the same modules.

        Shape:
            ids: (B, L) int64. Returns logits (B, L, V).
        """
        start = caches[0].length
        if not plain or ids.shape[1] != 1:
            return self._run(ids, caches, None, False, start)
        x = self.wte(ids) + self.wpe.weight[start : start + 1]  # (B, 1, E) + (1, E)
        for block, cache in zip(self.blocks, caches):  # Block.forward, one position, evaluation
            x = x + block.attn.decode_step(block.ln_1(x), cache)
            x = x + block.mlp(block.ln_2(x))
        return self.lm_head(self.ln_f(x))  # (B, 1, E) -> (B, 1, V)

    def _run(self, ids, caches, head_mask, need_weights, start):
        """The forward pass after the checks; ``start`` = positions already cached."""
        x = self.wte(ids)  # (B, L) -> (B, L, E)
        if self.wpe is not None:
            # rows start .. start+L-1 of chapter 12's table (the bound is checked above)
            x = x + self.wpe.weight[start : start + ids.shape[1]]  # (B, L, E) + (L, E)
        x = self.drop(x) if self.training else x
        weights = []
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                kv_cache=None if caches is None else caches[i],
                head_mask=None if head_mask is None else head_mask[i],
                need_weights=need_weights,
            )
            if need_weights:
                x, w = x
                weights.append(w)
        logits = self.lm_head(self.ln_f(x))  # (B, L, E) -> (B, L, V)
        return (logits, weights) if need_weights else logits


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding, LearnedPositionEmbedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in nats (natural log): ``-mean log p(target)``.

    ``targets`` are the ids shifted by one: ``targets[:, t] = ids[:, t + 1]``.

    Shape:
        logits: (B, T, V); targets: (B, T). Returns a scalar.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B, T, V) -> (B*T, V)

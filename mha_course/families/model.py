"""Chapter 20: one decoder-only model for every family in :class:`FamilyConfig`.

Chapter 13's GPT with each family's options: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``
(Gemma 2 also normalises what each sub-layer adds: ``sandwich_norm``), a final norm and a
read-out (tied or not, optionally soft-capped). Caches are the course's: a
:class:`~mha_course.KVCache` per global layer, a :class:`~mha_course.SlidingWindowCache` per
local layer (so decoding past the window holds only W keys), a
:class:`~mha_course.attention.mla.LatentKVCache` per MLA layer.
"""

from __future__ import annotations

import torch
from torch import nn

from mha_course._checks import check_nonnegative_int, check_rank, check_tensor, shape_str
from mha_course.attention.functions import attention_function
from mha_course.attention.mla import LatentKVCache
from mha_course.caches.base import Cache
from mha_course.caches.dense import KVCache
from mha_course.caches.window import SlidingWindowCache
from mha_course.families.config import FamilyConfig
from mha_course.families.latent import LatentAttention
from mha_course.families.layers import MLP, Attention, make_norm, softcap


def check_attention_mask(
    attention_mask: torch.Tensor, ids: torch.Tensor, start: int
) -> torch.Tensor:
    """``attention_mask`` (B, start + L) of 0/1 (or bool) -> bool, True = a real token."""
    check_tensor("attention_mask", attention_mask)
    want = (ids.shape[0], start + ids.shape[1])
    if tuple(attention_mask.shape) != want:
        raise ValueError(
            f"attention_mask: expected shape (B, S) = {want} (cached + new "
            f"positions), got {shape_str(attention_mask)}"
        )
    if attention_mask.dtype != torch.bool and not bool(
        ((attention_mask == 0) | (attention_mask == 1)).all()
    ):
        raise ValueError(
            "attention_mask: expected 1 (a real token) or 0 (padding), got other values"
        )
    return attention_mask.bool()


class Block(nn.Module):
    """One layer. Shape: x (B, L, E) -> (B, L, E)."""

    def __init__(self, config: FamilyConfig, layer: int, impl: str = "sdpa") -> None:
        super().__init__()
        self.attn_norm = make_norm(config) if config.pre_norm else None
        kind = LatentAttention if config.attention == "mla" else Attention
        self.attn = kind(config, layer, impl)
        self.mlp_norm = make_norm(config) if config.pre_norm else None
        self.mlp = MLP(config)
        self.post_attn_norm = make_norm(config) if config.sandwich_norm else None
        self.post_mlp_norm = make_norm(config) if config.sandwich_norm else None

    def forward(
        self,
        x: torch.Tensor,
        cache: Cache | None = None,
        positions: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        a = self.attn(x if self.attn_norm is None else self.attn_norm(x), cache, positions, keys)
        x = x + (a if self.post_attn_norm is None else self.post_attn_norm(a))
        m = self.mlp(x if self.mlp_norm is None else self.mlp_norm(x))
        return x + (m if self.post_mlp_norm is None else self.post_mlp_norm(m))


class FamilyLM(nn.Module):
    """Token ids in, next-token logits out, for any :class:`FamilyConfig`.

    ``forward(ids, caches=None, attention_mask=None)``: with ``caches`` (from
    :meth:`new_caches`) each call appends its positions, so a prompt then one id at a time gives
    the logits of one full call. ``attention_mask`` (``transformers``' convention: 1 = a real
    token, 0 = padding; over the cached AND the new positions) lets a batch of prompts of
    different lengths be padded, on the left (for generation) or the right: no query attends
    to padding, and a token's position is the number of real tokens before it in its row
    (``cumsum - 1``, as ``generate`` computes it), so every row gives the logits it gives alone.

    ``impl`` names the attention function every layer picks from the one registry
    (:data:`~mha_course.attention.functions.ATTENTION_FUNCTIONS`): ``"sdpa"`` (torch's fused
    kernel, as ``transformers``' default) or ``"eager"`` (the course's, weights materialised),
    or the course's kernels, which take plain causal prompts only; :attr:`dispatch` says what
    each layer ran and why.

    Shape:
        ids: (B, L) int64; attention_mask: (B, S) with S = cached + L. Returns logits (B, L, V).
    """

    def __init__(self, config: FamilyConfig, impl: str = "sdpa") -> None:
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos = nn.Embedding(c.max_positions, c.n_embd) if c.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(c, i, impl) for i in range(c.n_layer))
        self.norm = make_norm(c)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.embed.weight

    @property
    def impl(self) -> str:
        """The registry's attention function every layer picks (setting it sets every layer's)."""
        return self.blocks[0].attn.impl

    @impl.setter
    def impl(self, name: str) -> None:
        attention_function(name)  # an unknown name is refused, naming the registry's
        for block in self.blocks:
            block.attn.impl = name

    @property
    def dispatch(self) -> list[tuple[str, str | None] | None]:
        """Per layer, ``(what ran in the last call, why not impl or None)``: Gemma 2's capped
        layers run ``"eager"`` (no fused kernel takes a score cap), the others ``impl``."""
        return [block.attn.dispatch for block in self.blocks]

    def new_caches(self) -> list[Cache]:
        """One empty cache per layer (window layers keep only their last W keys)."""
        if self.config.attention == "mla":
            return [LatentKVCache() for _ in self.blocks]
        return [KVCache() if w is None else SlidingWindowCache(w) for w in self.config.windows]

    def forward(
        self,
        ids: torch.Tensor,
        caches: list[Cache] | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_tensor("ids", ids)
        check_rank("ids", ids, "(B, L)", rank=2)
        if ids.dtype != torch.long:
            raise ValueError(f"ids: expected int64 token ids of shape (B, L), got {ids.dtype}")
        c = self.config
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < c.vocab_size):
            raise ValueError(
                f"ids: expected token ids in [0, V = {c.vocab_size}), got values from "
                f"{int(ids.min())} to {int(ids.max())}"
            )
        if caches is not None and len(caches) != c.n_layer:
            raise ValueError(
                f"caches: expected {c.n_layer} caches (one per layer), got {len(caches)}"
            )
        start = 0 if caches is None else caches[0].length
        positions, keys = None, None
        if attention_mask is not None:
            keys = check_attention_mask(attention_mask, ids, start)
            positions = (keys.long().cumsum(-1) - 1).masked_fill(~keys, 0)[:, start:]  # (B, L)
        x = self.embed(ids)  # (B, L) -> (B, L, E)
        if c.embed_scale:  # Gemma: sqrt(E), rounded to the activations' dtype as its code does
            x = x * torch.tensor(c.n_embd**0.5, dtype=x.dtype)
        if self.pos is not None:
            if start + ids.shape[1] > c.max_positions:
                raise ValueError(
                    f"ids: expected at most max_positions = {c.max_positions} "
                    f"positions in all, got {start} cached + {shape_str(ids)}"
                )
            if positions is None:
                x = x + self.pos.weight[start : start + ids.shape[1]]  # (B, L, E) + (L, E)
            else:
                x = x + self.pos(positions)  # (B, L, E) + (B, L, E)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], positions, keys)
        return softcap(self.lm_head(self.norm(x)), c.final_softcap)  # (B, L, E) -> (B, L, V)


@torch.no_grad()
def greedy_generate(
    model: FamilyLM,
    ids: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Prompt once, then one token at a time with the course's caches, argmax each step.
    ``attention_mask`` (B, L) marks the real tokens of a left-padded batch of prompts (1 = real,
    0 = padding; as ``transformers``' batched ``generate``); each new token is real.

    As ``transformers``' greedy ``generate``: a row that has produced an end-of-sequence id gets
    ``pad_token_id`` from then on (default: the first end-of-sequence id), and decoding stops
    once every row has finished.

    Shape:
        ids: (B, L). Returns (B, L + n), n <= max_new_tokens.
    """
    check_nonnegative_int("max_new_tokens", max_new_tokens)
    check_rank("ids", ids, "(B, L)", rank=2)
    if ids.shape[1] == 0:
        raise ValueError(
            f"ids: expected a prompt of shape (B, L) with L >= 1 tokens, got {shape_str(ids)}"
        )
    eos = (
        []
        if eos_token_id is None
        else [eos_token_id]
        if isinstance(eos_token_id, int)
        else list(eos_token_id)
    )
    pad = eos[0] if pad_token_id is None and eos else pad_token_id
    caches = model.new_caches()
    out, step = ids, ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    eos_ids = torch.tensor(eos, dtype=ids.dtype, device=ids.device)
    mask = attention_mask
    for _ in range(max_new_tokens):
        nxt = model(step, caches, mask)[:, -1].argmax(-1)  # (B, L, V) -> (B,)
        if eos:
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)  # finished rows: padding
            done |= torch.isin(nxt, eos_ids)
        out, step = torch.cat([out, nxt[:, None]], dim=1), nxt[:, None]
        if mask is not None:  # (B, S) -> (B, S + 1): the new token is real
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        if eos and bool(done.all()):
            break
    return out

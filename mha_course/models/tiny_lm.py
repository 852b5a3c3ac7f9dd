"""Chapter 5: a tiny causal language model to decode with — one KV cache per layer.

Untrained and deliberately small: it exists so that a generation loop (prefill the prompt,
then one token per step) has something real to call, in the lecture, in the exercise and in
the grader, which all build the very same model from one seed.
"""

from __future__ import annotations

import torch
from torch import nn

from mha_course._checks import check_rank, check_tensor, shape_str
from mha_course.attention.mha import MultiHeadAttention
from mha_course.caches.dense import KVCache


class TinyCausalLM(nn.Module):
    """Token + position embeddings, ``num_layers`` causal self-attention blocks, logits.

    Each block is ``h = h + attention(LayerNorm(h))`` with :class:`MultiHeadAttention`
    (``is_causal=True``). With ``caches`` (one :class:`KVCache` per layer) every call appends
    its tokens' keys/values and its tokens' positions continue after the cached ones, so a
    prompt then one token at a time gives the same logits as one call on the whole sequence.

    Shape:
        ids: (B, L) int64 token ids. Returns logits (B, L, V) with V = ``vocab_size``.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        embed_dim: int = 32,
        num_heads: int = 4,
        num_layers: int = 2,
        max_len: int = 64,
    ) -> None:
        super().__init__()
        self.vocab_size, self.num_layers, self.max_len = vocab_size, num_layers, max_len
        self.tok = nn.Embedding(vocab_size, embed_dim)
        self.pos = nn.Embedding(max_len, embed_dim)
        self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_layers))
        self.attns = nn.ModuleList(
            MultiHeadAttention(embed_dim, num_heads, impl="eager") for _ in range(num_layers)
        )
        self.head = nn.Linear(embed_dim, vocab_size)

    def new_caches(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer (each layer caches its own keys/values)."""
        return [KVCache() for _ in range(self.num_layers)]

    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """Logits for every position of ``ids`` (continuing after the cached positions).

        Shape:
            ids: (B, L). Returns (B, L, V).
        """
        check_tensor("ids", ids)
        check_rank("ids", ids, "(B, L)", rank=2)
        if caches is not None and len(caches) != self.num_layers:
            raise ValueError(
                f"caches: expected a list of {self.num_layers} KVCache (one per layer), got {len(caches)}"
            )
        start = 0 if caches is None else caches[0].length  # positions already cached
        if start + ids.shape[1] > self.max_len:
            raise ValueError(
                f"ids: expected at most max_len = {self.max_len} positions in all, got "
                f"{start} cached + {shape_str(ids)}"
            )
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)  # (L,)
        h = self.tok(ids) + self.pos(positions)  # (B, L, E)
        for i, (norm, attn) in enumerate(zip(self.norms, self.attns)):
            a, _ = attn(norm(h), is_causal=True, kv_cache=None if caches is None else caches[i])
            h = h + a
        return self.head(h)  # (B, L, E) -> (B, L, V)


def greedy_generate_reference(
    model: TinyCausalLM, prompt: torch.Tensor, n_new: int
) -> torch.Tensor:
    """Greedy decoding WITHOUT a cache: run the whole sequence again for every new token.

    Slow on purpose (O(T²) work per token); it is the oracle a cached loop must equal.

    Shape:
        prompt: (B, P). Returns (B, P + n_new).
    """
    ids = prompt
    with torch.no_grad():
        for _ in range(n_new):
            next_id = model(ids)[:, -1].argmax(-1, keepdim=True)  # (B, L, V) -> (B, 1)
            ids = torch.cat([ids, next_id], dim=1)  # (B, T) -> (B, T + 1)
    return ids

"""Chapter 12: a tiny Transformer whose only variable is how it is told about positions.

``positions`` is one of :data:`POSITION_SCHEMES`:

* ``"none"`` — nothing: without a causal mask the model is permutation-equivariant;
* ``"learned"`` / ``"sinusoidal"`` — an absolute vector added to each token embedding;
* ``"alibi"`` / ``"rope"`` — relative, inside every attention layer
  (``MultiHeadAttention(alibi=True)`` / ``MultiHeadAttention(rope="half")``).
"""

from __future__ import annotations

import torch
from torch import nn

from mha_course.models.tiny_transformer import Block
from mha_course.ops.positions import LearnedPositionEmbedding, sinusoidal_positions

POSITION_SCHEMES = ("none", "learned", "sinusoidal", "alibi", "rope")


class PositionalTransformer(nn.Module):
    """Token embedding (+ absolute positions), ``num_layers`` pre-norm blocks, a read-out.

    Args:
        positions: one of :data:`POSITION_SCHEMES`.
        max_len: rows of the learned table (the other schemes take any length).
        causal: decoder-style (position t sees 0..t) or encoder-style (sees everything).

    Shape:
        tokens: (B, T) int64. Returns logits (B, T, vocab_size).
    """

    def __init__(
        self,
        vocab_size: int,
        positions: str = "none",
        *,
        max_len: int = 512,
        embed_dim: int = 32,
        num_heads: int = 4,
        num_layers: int = 2,
        causal: bool = True,
    ) -> None:
        super().__init__()
        if positions not in POSITION_SCHEMES:
            raise ValueError(f"positions: expected one of {POSITION_SCHEMES}, got {positions!r}")
        self.positions, self.causal, self.embed_dim = positions, causal, embed_dim
        attn_kwargs = {"rope": "half"} if positions == "rope" else {}
        if positions == "alibi":
            attn_kwargs = {"alibi": True}
        self.tok_emb = nn.Embedding(vocab_size, embed_dim)
        self.pos_emb = (
            LearnedPositionEmbedding(max_len, embed_dim) if positions == "learned" else None
        )
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, **attn_kwargs) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens: expected int64 shape (B, T), got {tuple(tokens.shape)} {tokens.dtype}"
            )
        T = tokens.shape[1]
        x = self.tok_emb(tokens)  # (B, T) -> (B, T, E)
        if self.pos_emb is not None:
            x = x + self.pos_emb(T)  # (B, T, E) + (T, E)
        elif self.positions == "sinusoidal":
            x = x + sinusoidal_positions(T, self.embed_dim, dtype=x.dtype, device=x.device)
        for block in self.blocks:
            x = block(x, is_causal=self.causal)
        return self.readout(self.norm(x))  # (B, T, E) -> (B, T, vocab_size)

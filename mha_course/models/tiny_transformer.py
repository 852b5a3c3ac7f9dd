"""Chapter 10: a tiny Transformer encoder that learns sequence reversal in seconds on CPU.

The task, its loss, its accuracies and the training loop live in :mod:`mha_course.analysis.tasks`
(chapter 6 trains on the same task); this module is only the model, whose heads chapter 10
prunes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mha_course.attention.mha import MultiHeadAttention


class Block(nn.Module):
    """Pre-norm Transformer block: x + attention(norm(x)), then x + MLP(norm(x)).

    Shape:
        x: (B, T, E). Returns (B, T, E).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        mlp_ratio: int = 2,
        **attn_kwargs,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        # attn_kwargs: e.g. rope="half" or alibi=True (chapter 12)
        self.attn = MultiHeadAttention(embed_dim, num_heads, num_kv_heads, **attn_kwargs)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, mlp_ratio * embed_dim),
            nn.GELU(),
            nn.Linear(mlp_ratio * embed_dim, embed_dim),
        )

    def forward(
        self, x: torch.Tensor, head_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), head_mask=head_mask, is_causal=is_causal)[0]
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """Token + position embeddings, ``num_layers`` blocks, a final norm and a linear read-out
    of one token per position (an encoder: every position sees every other).

    Shape:
        tokens: (B, T) int64 with T <= max_len. Returns logits (B, T, vocab_size).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int = 32,
        num_heads: int = 4,
        num_layers: int = 3,
        num_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.num_layers, self.num_heads = num_layers, num_heads
        self.tok_emb = nn.Embedding(vocab_size, embed_dim)
        self.pos_emb = nn.Embedding(max_len, embed_dim)
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, num_kv_heads) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, vocab_size)

    def forward(
        self, tokens: torch.Tensor, head_mask: torch.Tensor | Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``head_mask[i]`` goes to layer ``i``'s attention: (H,) or (B, H) multipliers, so a
        (num_layers, H) or (num_layers, B, H) tensor, or a list when layers have different H."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens: expected int64 shape (B, T), got {tuple(tokens.shape)} {tokens.dtype}"
            )
        if head_mask is not None and len(head_mask) != self.num_layers:
            raise ValueError(
                f"head_mask: expected one entry per layer ({self.num_layers}), got {len(head_mask)}"
            )
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)  # (B, T, E) + (T, E) -> (B, T, E)
        for i, block in enumerate(self.blocks):
            x = block(x, None if head_mask is None else head_mask[i])
        return self.readout(self.norm(x))

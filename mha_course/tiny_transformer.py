"""Chapter 10: a tiny Transformer encoder and an algorithmic task it learns in seconds on CPU.

The task is made by the code (nothing is downloaded): read a sequence of digits and write, at
every position, the digit that sits at the mirrored position (sequence reversal). Solving it
needs attention — position i must look at position T - 1 - i — so the model's heads matter, and
chapter 10 can ask which of them matter most.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .mha import MultiHeadAttention


def reversal_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random digit sequences and their reversals.

    Shape:
        Returns tokens (B, T) and targets (B, T), both int64, ``targets[:, i] = tokens[:, T-1-i]``.
    """
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return tokens, tokens.flip(-1)


class Block(nn.Module):
    """Pre-norm Transformer block: x + attention(norm(x)), then x + MLP(norm(x)).

    Shape:
        x: (B, T, E). Returns (B, T, E).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None,
                 mlp_ratio: int = 2, **attn_kwargs) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        # attn_kwargs: e.g. rope="half" or alibi=True (chapter 12)
        self.attn = MultiHeadAttention(embed_dim, num_heads, num_kv_heads, **attn_kwargs)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_ratio * embed_dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * embed_dim, embed_dim))

    def forward(self, x: torch.Tensor, head_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), head_mask=head_mask, is_causal=is_causal)[0]
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """Token + position embeddings, ``num_layers`` blocks, a final norm and a linear read-out
    of one token per position (an encoder: every position sees every other).

    Shape:
        tokens: (B, T) int64 with T <= max_len. Returns logits (B, T, vocab_size).
    """

    def __init__(self, vocab_size: int, max_len: int, embed_dim: int = 32, num_heads: int = 4,
                 num_layers: int = 3, num_kv_heads: int | None = None) -> None:
        super().__init__()
        self.num_layers, self.num_heads = num_layers, num_heads
        self.tok_emb = nn.Embedding(vocab_size, embed_dim)
        self.pos_emb = nn.Embedding(max_len, embed_dim)
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, num_kv_heads) for _ in range(num_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.readout = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens: torch.Tensor,
                head_mask: torch.Tensor | Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """``head_mask[i]`` goes to layer ``i``'s attention: (H,) or (B, H) multipliers, so a
        (num_layers, H) or (num_layers, B, H) tensor, or a list when layers have different H."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens: expected int64 shape (B, T), got {tuple(tokens.shape)} "
                             f"{tokens.dtype}")
        if head_mask is not None and len(head_mask) != self.num_layers:
            raise ValueError(f"head_mask: expected one entry per layer ({self.num_layers}), "
                             f"got {len(head_mask)}")
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)  # (B, T, E) + (T, E) -> (B, T, E)
        for i, block in enumerate(self.blocks):
            x = block(x, None if head_mask is None else head_mask[i])
        return self.readout(self.norm(x))


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position.

    Shape:
        logits: (B, T, V); targets: (B, T). Returns a scalar.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B, T, V) -> (B*T, V)


def sequence_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of positions whose most likely token is the target.

    Shape:
        logits: (B, T, V); targets: (B, T).
    """
    return (logits.argmax(-1) == targets).float().mean().item()


def train_reversal(model: TinyTransformer, steps: int = 300, batch_size: int = 64,
                   seq_len: int = 8, vocab_size: int = 10, lr: float = 3e-3,
                   seed: int = 0, progress: bool = False) -> list[float]:
    """Train ``model`` on :func:`reversal_batch` with AdamW; returns the loss of every step.

    ``progress=True`` shows a tqdm progress bar (its text varies run to run).
    """
    from tqdm import tqdm  # text bar: the committed notebook output shows its final state

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    model.train()
    for _ in tqdm(range(steps), desc="training", disable=not progress, mininterval=1.0):
        tokens, targets = reversal_batch(batch_size, seq_len, vocab_size, generator=g)
        loss = sequence_loss(model(tokens), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses

"""Chapter 3: one head of self-attention with learned projections W_Q, W_K, W_V."""

from __future__ import annotations

import torch
from torch import nn

from mha_course._checks import check_rank, check_tensor, shape_str
from mha_course.ops.sdpa import scaled_dot_product_attention


class SelfAttentionHead(nn.Module):
    """A single attention head: project, attend, return.

    ``W_Q`` says what a token looks for, ``W_K`` what it offers to be found by, ``W_V`` what it
    contributes once found. Parameters: 3·E·D (+ 3·D with bias).

    Shape:
        x: (B, T, E). Returns output (B, T, D) and weights (B, T, T).
    """

    def __init__(self, embed_dim: int, head_dim: int, bias: bool = False) -> None:
        super().__init__()
        self.embed_dim, self.head_dim = embed_dim, head_dim
        self.W_Q = nn.Linear(embed_dim, head_dim, bias=bias)
        self.W_K = nn.Linear(embed_dim, head_dim, bias=bias)
        self.W_V = nn.Linear(embed_dim, head_dim, bias=bias)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Project ``x`` to queries, keys and values, then attend (see
        :func:`~mha_course.scaled_dot_product_attention` for ``attn_mask`` / ``is_causal``).

        Shape:
            x: (B, T, E). Returns output (B, T, D) and weights (B, T, T).
        """
        check_tensor("x", x)
        check_rank("x", x, "(B, T, E)", rank=3)
        if x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x: expected shape (B, T, E) with E = {self.embed_dim}, got {shape_str(x)}"
            )
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)  # (B, T, E) -> (B, T, D) each
        return scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, return_weights=True
        )

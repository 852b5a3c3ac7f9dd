"""The course's own earlier tasks of the torch exercises (chapters 5-19) that a later task of the
same exercise calls, for grading the later item on its own (issue #31 item 5; the design, and
chapters 1-4's, in :mod:`mha_course.grading.child.substitutes`).

A separate module because these need torch (``Block`` is an ``nn.Module``): chapter 1's NumPy
child, which imports ``substitutes``, stays light. The engine stubs EVERY def and class of this
module out of every unit but, in a second run, the ones that item may use: so each one here is
self-contained (``tile_step`` folds its tile in itself instead of calling ``online_update``,
which may be stubbed in that run), and imports nothing of the course.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def offset_causal_mask(L: int, offset: int) -> torch.Tensor:
    """ex05 task 1: True where new query i may attend to key j, ``j <= i + offset`` (the
    solution's decoding step builds its mask inline; a learner's often calls this).

    Shape:
        Returns (L, offset + L) bool.
    """
    return torch.ones(L, offset + L, dtype=torch.bool).tril(diagonal=offset)


def repeat_kv_heads(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """ex07 task 1: each key/value head copied ``n_rep`` times, next to itself.

    Shape:
        x: (B, G, S, D). Returns (B, G * n_rep, S, D).
    """
    return x.repeat_interleave(n_rep, dim=1)  # (B, G, S, D) -> (B, G * n_rep, S, D)


def online_update(
    m: torch.Tensor, row_sum: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor, value
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ex09 task 1: fold a block of scores into the running (m, row_sum, acc).

    Shape:
        m, row_sum: (..., L); acc: (..., L, Dv); scores: (..., L, Sb); value: (..., Sb, Dv).
        Returns (..., L), (..., L), (..., L, Dv).
    """
    m_new = torch.maximum(m, scores.amax(dim=-1))  # (..., L)
    alpha = torch.exp(m - m_new)
    p = torch.exp(scores - m_new.unsqueeze(-1))  # (..., L) -> (..., L, 1), over Sb
    return m_new, alpha * row_sum + p.sum(dim=-1), alpha.unsqueeze(-1) * acc + p @ value


def tile_step(q_block, k_block, v_block, m, row_sum, acc, q_start, k_start, is_causal):
    """ex09 task 2: one tile's scaled scores, causally masked at its global offsets, folded in.

    Shape:
        q_block: (..., Bq, D); k_block: (..., Bk, D); v_block: (..., Bk, Dv);
        m, row_sum: (..., Bq); acc: (..., Bq, Dv). Returns the same three shapes.
    """
    scores = q_block @ k_block.transpose(-2, -1) / math.sqrt(q_block.shape[-1])  # (..., Bq, Bk)
    if is_causal:
        rows = q_start + torch.arange(q_block.shape[-2], device=q_block.device)  # (Bq,)
        cols = k_start + torch.arange(k_block.shape[-2], device=q_block.device)  # (Bk,)
        scores = scores.masked_fill(cols > rows.unsqueeze(-1), float("-inf"))
    m_new = torch.maximum(m, scores.amax(dim=-1))  # task 1's update, here: it may be stubbed
    alpha = torch.exp(m - m_new)
    p = torch.exp(scores - m_new.unsqueeze(-1))
    return m_new, alpha * row_sum + p.sum(dim=-1), alpha.unsqueeze(-1) * acc + p @ v_block


def rope(x: torch.Tensor, positions: torch.Tensor, layout: str):
    """ex12 task 1: each feature pair rotated by ``positions[l] · 10000^(-2i/D)``, and the cos
    and sin tables in x's layout.

    Shape:
        x: (..., L, D); positions: (L,). Returns (..., L, D), (L, D), (L, D).
    """
    D = x.shape[-1]
    theta = 10000.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * theta  # (L, 1) * (D/2,) -> (L, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if layout == "half":
        a, b = x[..., : D // 2], x[..., D // 2 :]  # (..., L, D) -> 2 x (..., L, D/2)
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
        return out, torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., L, D) -> 2 x (..., L, D/2)
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out, cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)


class Block(torch.nn.Module):
    """ex13 task 5: the pre-norm decoder block, ``x + attn(ln_1(x))`` (causal) then
    ``x + mlp(ln_2(x))``, with the course's parameter names (``attn.q_proj``, ``mlp.fc``, ...).

    Shape:
        x: (B, T, E). Returns (B, T, E).
    """

    def __init__(self, config) -> None:
        super().__init__()
        E, W, bias = config.n_embd, config.kv_heads * config.head_dim, config.bias
        self.heads = (config.n_head, config.kv_heads)  # (H, G)
        self.ln_1 = torch.nn.LayerNorm(E, bias=bias)
        self.attn = torch.nn.Module()  # a container, for the names: the forward is below
        self.attn.q_proj = torch.nn.Linear(E, E, bias=bias)
        self.attn.k_proj = torch.nn.Linear(E, W, bias=bias)
        self.attn.v_proj = torch.nn.Linear(E, W, bias=bias)
        self.attn.out_proj = torch.nn.Linear(E, E, bias=bias)
        self.ln_2 = torch.nn.LayerNorm(E, bias=bias)
        self.mlp = torch.nn.Module()
        self.mlp.fc = torch.nn.Linear(E, config.mlp_ratio * E, bias=bias)
        self.mlp.proj = torch.nn.Linear(config.mlp_ratio * E, E, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (B, T, E), (H, G) = x.shape, self.heads
        D = E // H
        h = self.ln_1(x)
        q = self.attn.q_proj(h).view(B, T, H, D).transpose(1, 2)  # (B, T, E) -> (B, H, T, D)
        k, v = (
            p(h).view(B, T, G, D).transpose(1, 2).repeat_interleave(H // G, dim=1)
            for p in (self.attn.k_proj, self.attn.v_proj)
        )  # (B, T, G*D) -> (B, G, T, D) -> (B, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        a = (weights @ v).transpose(1, 2).reshape(B, T, E)  # (B, H, T, D) -> (B, T, E)
        x = x + self.attn.out_proj(a)
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln_2(x))))


def ring_slots(positions: torch.Tensor, window: int, num_sink: int) -> torch.Tensor:
    """ex14 task 2: the ring slot ``(p - num_sink) % W`` of each position, -1 for a sink.

    Shape:
        positions: (N,) int. Returns (N,) int.
    """
    return torch.where(positions < num_sink, -1, (positions - num_sink) % window)


def merge_safe(out_a, lse_a, out_b, lse_b) -> tuple[torch.Tensor, torch.Tensor]:
    """ex19 task 4: two partials over disjoint keys merged; an empty one (lse -inf) weighs 0.

    Shape:
        out_a, out_b: (B, H, L, Dv); lse_a, lse_b: (B, H, L). Returns (B, H, L, Dv), (B, H, L).
    """
    m = torch.maximum(lse_a, lse_b)  # (B, H, L)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # both empty: any finite shift
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)  # 0 for an empty partial
    total = w_a + w_b
    safe = torch.where(total > 0, total, torch.ones_like(total))[..., None]  # (B, H, L, 1)
    return (w_a[..., None] * out_a + w_b[..., None] * out_b) / safe, m + torch.log(total)

"""Chapters 6 and 10 (and 12): the sequence-reversal task, made by the code, and its scores.

Read a sequence of digits and write, at every position, the digit that sits at the mirrored
position. Solving it needs attention — position i must look at position T - 1 - i — so it is
the course's smallest task on which heads matter. Nothing is downloaded.

Two accuracies, two names: :func:`digit_accuracy` counts positions (chapter 10 reports it),
:func:`sequence_accuracy` counts whole sequences with every digit right (chapter 6 reports both).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def reversal_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random digit sequences and their reversals.

    Shape:
        Returns tokens (B, T) and targets (B, T), both int64, ``targets[:, i] = tokens[:, T-1-i]``.
    """
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return tokens, tokens.flip(-1)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position.

    Shape:
        logits: (B, T, V); targets: (B, T). Returns a scalar.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B, T, V) -> (B*T, V)


def digit_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of positions (digits) whose most likely token is the target.

    Shape:
        logits: (B, T, V); targets: (B, T).
    """
    return (logits.argmax(-1) == targets).float().mean().item()


def sequence_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of whole sequences with every position right (stricter than :func:`digit_accuracy`).

    Shape:
        logits: (B, T, V); targets: (B, T).
    """
    return (logits.argmax(-1) == targets).all(dim=-1).float().mean().item()  # (B, T) -> (B,)


def train_reversal(
    model: nn.Module,
    steps: int = 300,
    batch_size: int = 64,
    seq_len: int = 8,
    vocab_size: int = 10,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
    logits_of: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
    optimizer: str = "adamw",
) -> list[float]:
    """Train ``model`` on :func:`reversal_batch` with :func:`sequence_loss`; returns the loss of
    every step. The model is left in eval mode.

    ``logits_of(model, tokens)`` gives the (B, T, V) logits (default ``model(tokens)``).
    ``optimizer``: ``"adamw"`` (weight decay 0.01) or ``"adam"``. ``progress=True`` shows a
    tqdm text bar (its timing text varies run to run).
    """
    from tqdm import tqdm  # text bar: the committed notebook output shows its final state

    if optimizer not in ("adamw", "adam"):
        raise ValueError(f"optimizer: expected 'adamw' or 'adam', got {optimizer!r}")
    logits_of = logits_of or (lambda m, tokens: m(tokens))
    g = torch.Generator().manual_seed(seed)
    opt = (
        torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        if optimizer == "adamw"
        else torch.optim.Adam(model.parameters(), lr=lr)
    )
    losses = []
    model.train()
    for _ in tqdm(range(steps), desc="training", disable=not progress, mininterval=1.0):
        tokens, targets = reversal_batch(batch_size, seq_len, vocab_size, generator=g)
        loss = sequence_loss(logits_of(model, tokens), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses

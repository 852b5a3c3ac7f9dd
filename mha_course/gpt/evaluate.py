"""Chapter 13: validation loss in nats per character, and the baselines that give it a scale.

The unit: cross-entropy with the natural log, averaged over every predicted character —
``exp(loss)`` is the perplexity, ``loss / ln 2`` the bits per character. A uniform guess over
V characters scores ``ln V``; a unigram model (character frequencies) and a bigram model
(the previous character only) are the first rungs above it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mha_course._checks import renamed_keywords
from mha_course.gpt.config import RENAMED
from mha_course.gpt.data import validation_windows
from mha_course.gpt.model import lm_loss


@renamed_keywords(**RENAMED)
@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: torch.Tensor,
    context_length: int,
    batch_size: int = 64,
    max_windows: int | None = None,
    head_mask: torch.Tensor | None = None,
) -> float:
    """Mean next-token loss (nats per token) over non-overlapping windows of ``data``.

    Every position of each window is scored (position 0 predicts with one character of
    context, position T-1 with T), as nanoGPT's ``estimate_loss`` does. The model is put in
    eval mode (dropout off) and restored.

    Shape:
        data: (N,) int64 ids. Returns a float.
    """
    x, y = validation_windows(data, context_length, max_windows)  # (N_windows, T) each
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
        kwargs = {} if head_mask is None else {"head_mask": head_mask}
        loss = lm_loss(model(xb, **kwargs), yb)
        total += loss.item() * yb.numel()
        count += yb.numel()
    model.train(was_training)
    return total / count


def unigram_loss(
    train: torch.Tensor, val: torch.Tensor, vocab_size: int, alpha: float = 1.0
) -> float:
    """Nats/char of character frequencies from ``train`` (add-``alpha`` smoothing) on ``val``.

    Shape:
        train: (N,), val: (M,) int64 ids.
    """
    counts = torch.bincount(train, minlength=vocab_size).double() + alpha  # (V,)
    log_p = counts.log() - counts.sum().log()
    return -log_p[val].mean().item()


def bigram_loss(
    train: torch.Tensor, val: torch.Tensor, vocab_size: int, alpha: float = 0.1
) -> float:
    """Nats/char of ``p(next | previous)`` counted on ``train`` (add-``alpha``) on ``val``.

    Shape:
        train: (N,), val: (M,) int64 ids. The first validation character is not scored.
    """
    V = vocab_size
    pairs = train[:-1] * V + train[1:]  # (N - 1,) flat index of (previous, next)
    counts = torch.bincount(pairs, minlength=V * V).double().view(V, V) + alpha  # (V, V)
    log_p = counts.log() - counts.sum(dim=1, keepdim=True).log()  # rows: previous character
    return -log_p[val[:-1], val[1:]].mean().item()


def uniform_loss(vocab_size: int) -> float:
    """``ln V``: the loss of guessing every character with equal probability."""
    return math.log(vocab_size)

"""Chapter 13: what each head does — scores for simple, named behaviours.

Each score reads a head's attention weights (B, H, T, T) and returns one number per head:

* **previous token**: the weight query ``t`` puts on key ``t - 1``;
* **first token**: the weight on key 0 (for ``t >= 1``) — heads that "park" their attention;
* **induction**: on a random sequence repeated twice, ``r r``, the weight that query
  ``n + i`` (the second copy of token ``r_i``) puts on key ``i + 1`` — the token that *followed*
  the earlier occurrence. Random tokens mean no other cue can explain it (Olsson et al., 2022);
* **delimiter**: the total weight on delimiter keys (e.g. newlines), next to the weight a
  uniform head would put there.

Scores are means over the batch and the scored query positions.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_rank, check_tensor
from mha_course.gpt.model import GPT


@torch.no_grad()
def attention_weights(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """Every layer's attention weights on ``ids``, stacked.

    Shape:
        ids: (B, T). Returns (n_layer, B, H, T, T).
    """
    was_training = model.training
    model.eval()
    _, weights = model(ids, need_weights=True)
    model.train(was_training)
    return torch.stack(weights)  # n_layer x (B, H, T, T) -> (n_layer, B, H, T, T)


def _check(weights: torch.Tensor) -> tuple[int, int]:
    check_tensor("weights", weights)
    check_rank("weights", weights, "(B, H, T, T)", rank=4)
    T, S = weights.shape[-2:]
    if T != S:
        raise ValueError(f"weights: expected self-attention (B, H, T, T), got T={T}, S={S}")
    return weights.shape[1], T


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight of query ``t`` on key ``t - 1`` (t = 1..T-1).

    Shape:
        weights: (B, H, T, T). Returns (H,).
    """
    _check(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (B, H, T-1) -> (H,)


def first_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight of queries t = 1..T-1 on key 0.

    Shape:
        weights: (B, H, T, T). Returns (H,).
    """
    _check(weights)
    return weights[:, :, 1:, 0].mean(dim=(0, -1))  # (B, H, T-1) -> (H,)


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """On ``ids = r r`` (a block of ``period`` tokens, then the same block again), the mean
    weight of query ``period + i`` on key ``i + 1``, for i = 0..T - period - 1.

    Shape:
        weights: (B, H, T, T) with T <= 2 * period. Returns (H,).
    """
    _, T = _check(weights)
    if not 0 < period < T:
        raise ValueError(f"period: expected 0 < period < T = {T}, got {period}")
    # query t = period + i looks at key t - period + 1: the diagonal at offset -(period - 1)
    return weights.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, -1))


def delimiter_score(
    weights: torch.Tensor, ids: torch.Tensor, delimiter_ids: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Total weight on delimiter keys, and what a uniform causal head would give.

    Shape:
        weights: (B, H, T, T); ids: (B, T). Returns (H,) score and a scalar baseline.
    """
    _, T = _check(weights)
    is_delim = torch.isin(ids, torch.tensor(delimiter_ids, device=ids.device))  # (B, T)
    mass = (weights * is_delim[:, None, None, :]).sum(-1)  # (B, H, T, T) -> (B, H, T)
    visible = torch.arange(1, T + 1, device=ids.device)  # query t sees t + 1 keys
    uniform = is_delim.float().cumsum(-1) / visible  # (B, T): delimiter share of visible keys
    return mass.mean(dim=(0, -1)), uniform.mean()


def repeated_random_tokens(
    batch: int, period: int, vocab_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``r r``: ``period`` uniformly random ids, then the same ids again.

    Shape:
        Returns (B, 2 * period) int64.
    """
    r = torch.randint(0, vocab_size, (batch, period), generator=generator)
    return torch.cat([r, r], dim=1)  # (B, n) -> (B, 2n)

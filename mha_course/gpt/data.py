"""Chapter 13: batches for next-token prediction — random windows and their shift by one.

A batch is ``B`` windows of ``T + 1`` consecutive ids; the model reads the first ``T`` and is
scored on the last ``T``: ``targets[:, t] = ids[:, t + 1]``. The windows of step ``s`` come from
a generator seeded by ``(seed, s)`` alone, so a resumed run, and every rank of a distributed
run, draw exactly the same *global* batch; each rank then takes its own slice of it.
"""

from __future__ import annotations

import torch

from mha_course._checks import renamed_keywords
from mha_course.gpt.config import RENAMED


def step_generator(seed: int, step: int) -> torch.Generator:
    """The random stream of one training step (independent of anything that ran before)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def batch_starts(
    n_tokens: int, context_length: int, batch_size: int, generator: torch.Generator
) -> torch.Tensor:
    """``batch_size`` random window starts in ``[0, n_tokens - context_length - 1]``.

    Shape:
        Returns (B,) int64.
    """
    if n_tokens <= context_length + 1:
        raise ValueError(
            f"data: expected more than context_length + 1 = {context_length + 1} tokens, "
            f"got {n_tokens}"
        )
    return torch.randint(n_tokens - context_length - 1, (batch_size,), generator=generator)


def windows(
    data: torch.Tensor, starts: torch.Tensor, context_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and shifted-by-one targets for windows starting at ``starts``.

    Shape:
        data: (N,) int64; starts: (B,). Returns x (B, T) and y (B, T), ``y[:, t] = x[:, t + 1]``
        inside the window (and ``y[:, T-1]`` the id after it).
    """
    offsets = torch.arange(context_length + 1)  # (T + 1,)
    chunk = data[starts[:, None] + offsets]  # (B, 1) + (T + 1,) -> (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]


@renamed_keywords(**RENAMED)
def training_batch(
    data: torch.Tensor,
    context_length: int,
    global_batch: int,
    seed: int,
    step: int,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s share of step ``step``'s global batch.

    Shape:
        Returns x, y: (global_batch / world_size, T) each.
    """
    if global_batch % world_size:
        raise ValueError(
            f"batch_size: the global batch ({global_batch}) must be divisible by "
            f"the number of processes ({world_size})"
        )
    starts = batch_starts(len(data), context_length, global_batch, step_generator(seed, step))
    share = global_batch // world_size
    return windows(data, starts[rank * share : (rank + 1) * share], context_length)


@renamed_keywords(**RENAMED)
def validation_windows(
    data: torch.Tensor, context_length: int, max_windows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows that tile the validation text from its start (fixed, no
    randomness), at most ``max_windows`` of them.

    Shape:
        Returns x, y: (N_windows, T) each.
    """
    n = (len(data) - 1) // context_length
    if max_windows is not None:
        n = min(n, max_windows)
    starts = torch.arange(n) * context_length  # (N_windows,)
    return windows(data, starts, context_length)

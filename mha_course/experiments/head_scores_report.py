"""Chapter 13's head-specialisation evidence (§7): each head's score per validation window, and a
95 % bootstrap interval over the windows, so that the lecture's evidence cell holds only the claim,
the measurement and its assertion (issue 32: bookkeeping moved into the experiment modules).
"""

from __future__ import annotations

import torch

from mha_course.analysis.stats import Interval, bootstrap_ci
from mha_course.gpt.heads import delimiter_score, first_token_score, previous_token_score


def per_window_scores(
    weights: list[torch.Tensor], ids: torch.Tensor, delimiters: list[int]
) -> dict[str, torch.Tensor]:
    """Each head's previous-token, first-token and delimiter score, one window at a time.

    Shape:
        weights: n_layer tensors (B, H, T, T); ids: (B, T) -> {score: (B, n_layer, H)}.
    """
    if len(weights) == 0 or ids.dim() != 2 or weights[0].shape[0] != ids.shape[0]:
        raise ValueError(
            "weights, ids: expected a non-empty list of (B, H, T, T) and ids (B, T) with the same "
            f"B; got {len(weights)} tensors {tuple(weights[0].shape) if weights else ()} and ids "
            f"{tuple(ids.shape)}"
        )
    B = ids.shape[0]
    out = {
        name: torch.stack([torch.stack([fn(w[b : b + 1]) for w in weights]) for b in range(B)])
        for name, fn in (("previous", previous_token_score), ("first", first_token_score))
    }  # (B, n_layer, H) each
    out["newline"] = torch.stack(
        [
            torch.stack(
                [delimiter_score(w[b : b + 1], ids[b : b + 1], delimiters)[0] for w in weights]
            )
            for b in range(B)
        ]
    )  # (B, n_layer, H)
    return out


def score_intervals(
    weights: list[torch.Tensor], ids: torch.Tensor, delimiters: list[int], n_resamples: int = 2000
) -> dict[str, list[list[Interval]]]:
    """Per score, layer and head: the 95 % bootstrap interval of its mean over the B windows."""
    return {
        name: [
            [bootstrap_ci(s[:, i, j].numpy(), n_resamples=n_resamples) for j in range(s.shape[2])]
            for i in range(s.shape[1])
        ]
        for name, s in per_window_scores(weights, ids, delimiters).items()
    }

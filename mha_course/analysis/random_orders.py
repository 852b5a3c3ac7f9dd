"""Chapter 10's exact random baseline: with all but ``keep`` heads removed, a random pruning order
ends in each set of ``keep`` surviving heads with equal probability, so scoring every such set
gives the exact distribution of a random order's result at that point (no sampling), and an
importance order is read as a percentile within it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch

from mha_course._checks import check_positive_int


def survivor_population(
    score: Callable[[torch.Tensor], float], layers: int, heads: int, keep: int = 2
) -> np.ndarray:
    """``score(head_mask)`` for every way of keeping exactly ``keep`` of the ``layers · heads``
    heads, in :func:`itertools.combinations` order of the flat head index ``layer · heads + h``.

    Shape:
        head_mask passed to ``score``: (layers, heads), 1.0 for the kept heads, 0.0 elsewhere;
        returns (C(layers · heads, keep),).
    """
    check_positive_int("layers", layers)
    check_positive_int("heads", heads)
    check_positive_int("keep", keep)
    if keep > layers * heads:
        raise ValueError(f"keep: expected at most layers · heads = {layers * heads}; got {keep}")
    out = []
    for kept in itertools.combinations(range(layers * heads), keep):
        mask = torch.zeros(layers * heads)
        mask[list(kept)] = 1.0
        out.append(score(mask.view(layers, heads)))  # (layers · heads,) -> (layers, heads)
    return np.array(out)


def percentile_in(value: float, population: np.ndarray) -> float:
    """The share of ``population`` below ``value``, ties counted half (0 … 1)."""
    population = np.asarray(population)
    if population.ndim != 1 or len(population) == 0:
        raise ValueError(
            f"population: expected a non-empty 1-D array of results; got shape {population.shape}"
        )
    return float((population < value).mean() + 0.5 * (population == value).mean())

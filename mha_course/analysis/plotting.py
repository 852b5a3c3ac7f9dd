"""Attention maps with matplotlib: one head, or a grid of heads, with token labels."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


def _to_numpy(w) -> np.ndarray:
    if isinstance(w, torch.Tensor):
        return w.detach().float().cpu().numpy()
    return np.asarray(w, dtype=float)


def plot_attention(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    annotate: bool = False,
    cmap: str = "viridis",
    colorbar: bool = True,
):
    """Draw one attention map: rows are queries, columns keys, colour the weight.

    Shape:
        weights: (L, S). Returns the matplotlib Axes.
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"weights: expected shape (L, S), got {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * w.shape[1] + 2.5, 0.45 * w.shape[0] + 1.5))
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=max(1e-12, float(w.max())), aspect="auto")
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position (attending)")
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), labels=list(key_labels), rotation=60, ha="right")
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), labels=list(query_labels))
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if w[i, j] < 0.6 * w.max() else "black",
                )
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ncols: int = 4,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
):
    """Draw a grid of attention maps, one per head.

    Shape:
        weights: (H, L, S). Returns the matplotlib Figure.
    """
    w = _to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"weights: expected shape (H, L, S), got {w.shape}")
    H = w.shape[0]
    ncols = min(ncols, H)
    nrows = (H + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 3.0 * nrows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        plot_attention(
            w[h],
            query_labels,
            key_labels,
            ax=ax,
            colorbar=False,
            title=titles[h] if titles else f"head {h}",
        )
        if h % ncols:
            ax.set_ylabel("")
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig

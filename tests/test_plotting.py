"""Attention plots: the image is the weights, axes are labelled, tokens label the ticks."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # headless; before pyplot draws anything

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from mha_course import plot_attention, plot_heads  # noqa: E402

TOKENS = ["the", "cat", "sat"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_plot_attention_shows_the_weights_with_labels():
    w = torch.softmax(torch.randn(3, 3, dtype=torch.float64, requires_grad=True), dim=-1)
    ax = plot_attention(w, TOKENS, TOKENS, title="one head", annotate=True)
    np.testing.assert_allclose(ax.images[0].get_array(), w.detach().numpy(), rtol=1e-6)
    assert ax.get_title() == "one head"
    assert ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert len(ax.texts) == 9  # one annotation per cell
    assert len(ax.figure.axes) == 2  # the map and its colorbar


def test_plot_attention_accepts_numpy_and_an_axes():
    fig, ax = plt.subplots()
    out = plot_attention(np.eye(2), ax=ax, colorbar=False)
    assert out is ax and len(fig.axes) == 1


def test_plot_heads_grid():
    w = torch.softmax(torch.randn(5, 3, 3), dim=-1)  # (H, L, S)
    fig = plot_heads(w, TOKENS, TOKENS, ncols=3, suptitle="five heads")
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(fig.axes) == 6 and len(visible) == 5  # 2 x 3 grid, last cell off
    assert [ax.get_title() for ax in visible] == [f"head {h}" for h in range(5)]
    assert fig._suptitle.get_text() == "five heads"


@pytest.mark.parametrize("fn,shape", [(plot_attention, (2, 3, 3)), (plot_heads, (3, 3))])
def test_plot_rejects_wrong_rank(fn, shape):
    with pytest.raises(ValueError, match=r"weights: expected shape \("):
        fn(np.zeros(shape))

"""Chapter 1's NumPy attention against torch (softmax, and SDPA with scale 1 and 1/sqrt(D))."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_course import dot_product_attention, softmax

rng = np.random.default_rng(0)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_matches_torch(axis):
    x = rng.normal(size=(4, 6))
    expected = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
    np.testing.assert_allclose(softmax(x, axis=axis), expected, rtol=1e-12, atol=1e-15)


def test_softmax_does_not_overflow():
    x = np.array([1000.0, 1001.0, 1002.0])
    with np.errstate(over="raise"):
        w = softmax(x)
    np.testing.assert_allclose(w, softmax(x - 1000.0), rtol=1e-12)  # shift invariance
    assert abs(w.sum() - 1.0) < 1e-12


@pytest.mark.parametrize("scale", [None, 0.5])
def test_dot_product_attention_matches_torch_sdpa(scale):
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    out, weights = dot_product_attention(q, k, v, scale=scale)
    assert out.shape == (3, 2) and weights.shape == (3, 5)
    t = [torch.from_numpy(a) for a in (q, k, v)]
    expected = F.scaled_dot_product_attention(*t, scale=1.0 if scale is None else scale)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.sum(-1), np.ones(3), rtol=1e-12)


def test_one_query_and_lists():
    k = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    v = [[1.0], [2.0], [3.0]]
    out, weights = dot_product_attention([0.0, 3.0], k, v)  # one query (D,)
    assert out.shape == (1,) and weights.shape == (3,)
    batch_out, batch_w = dot_product_attention(np.array([[0.0, 3.0]]), k, v)
    np.testing.assert_allclose(out, batch_out[0], rtol=1e-12)
    np.testing.assert_allclose(weights, batch_w[0], rtol=1e-12)
    # Keys 1 and 2 both score 3, key 0 scores 0: equal weight on the tied pair.
    assert weights[1] == pytest.approx(weights[2]) and weights[0] < weights[1]

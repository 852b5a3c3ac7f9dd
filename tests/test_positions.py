"""Absolute and ALiBi positions (chapter 12): the sinusoidal formula and its shift-as-rotation
property, the learned table, ALiBi slopes (the paper's recipe) and bias with a causal offset."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from mha_course import LearnedPositionEmbedding, alibi_bias, alibi_slopes, sinusoidal_positions

F64 = {"rtol": 1e-12, "atol": 1e-12}


def test_sinusoidal_matches_the_paper_formula():
    pe = sinusoidal_positions(50, 16, dtype=torch.float64)
    assert pe.shape == (50, 16)
    for p in (0, 1, 7, 49):
        for i in range(8):
            w = 1 / 10000 ** (2 * i / 16)
            assert math.isclose(pe[p, 2 * i].item(), math.sin(p * w), abs_tol=1e-12)
            assert math.isclose(pe[p, 2 * i + 1].item(), math.cos(p * w), abs_tol=1e-12)
    assert_close(sinusoidal_positions(torch.tensor([3, 7]), 16, dtype=torch.float64), pe[[3, 7]])


def test_sinusoidal_shift_is_one_rotation_for_every_position():
    E, k = 8, 5
    pe = sinusoidal_positions(40, E, dtype=torch.float64)
    w = 1 / 10000 ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
    R = torch.zeros(E, E, dtype=torch.float64)
    for i, wi in enumerate(w * k):  # block i maps (sin a, cos a) to (sin(a + kw), cos(a + kw))
        c, s = torch.cos(wi), torch.sin(wi)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    assert_close(pe[:-k] @ R.T, pe[k:], **F64)


def test_learned_embedding():
    torch.manual_seed(0)
    emb = LearnedPositionEmbedding(10, 6)
    assert emb(4).shape == (4, 6) and emb(torch.arange(3).expand(2, 3)).shape == (2, 3, 6)
    emb(torch.arange(10)).sum().backward()
    assert emb.weight.grad is not None
    with pytest.raises(ValueError, match="positions:"):
        emb(11)
    with pytest.raises(ValueError, match="max_len:"):
        LearnedPositionEmbedding(0, 6)


def test_alibi_slopes_follow_the_paper():
    assert_close(
        alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)], dtype=torch.float64), **F64
    )
    assert_close(
        alibi_slopes(4),
        torch.tensor([2.0 ** -(2 * i) for i in range(1, 5)], dtype=torch.float64),
        **F64,
    )
    six = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert_close(alibi_slopes(6), torch.tensor(six, dtype=torch.float64), **F64)


def test_alibi_bias_values_and_offset():
    bias = alibi_bias(2, 4, dtype=torch.float64)
    assert bias.shape == (2, 4, 4)
    slopes = alibi_slopes(2)
    for h in range(2):
        for i in range(4):
            for j in range(4):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(i - j))
    full = alibi_bias(4, 9, dtype=torch.float64)
    assert_close(alibi_bias(4, 3, 9, dtype=torch.float64), full[:, -3:])  # default offset S - L
    assert_close(alibi_bias(4, 2, 9, offset=3, dtype=torch.float64), full[:, 3:5])


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: sinusoidal_positions(4, 7), "embed_dim:"),
        (lambda: sinusoidal_positions(-1, 8), "positions:"),
        (lambda: alibi_slopes(0), "num_heads:"),
        (lambda: alibi_bias(2, 3, 5, offset=-1), "offset:"),
        (lambda: alibi_bias(2, 3, slopes=torch.ones(3)), "slopes:"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()

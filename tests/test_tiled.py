"""Chapter 9: the online softmax and tiled attention against torch's SDPA (float64)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course.device import peak_memory_bytes
from mha_course.kernels.tiled import online_softmax_update, tiled_attention


def _qkv(*lead, L=37, S=37, D=8, Dv=None, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    Dv = D if Dv is None else Dv
    return (
        torch.randn(*lead, L, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, Dv, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_q,block_k", [(1, 1), (7, 5), (16, 16), (64, 3), (100, 100)])
def test_matches_torch_sdpa(is_causal, block_q, block_k):
    q, k, v = _qkv(2, 3)
    out = tiled_attention(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S", [(5, 23), (23, 5), (1, 9)])
def test_cross_lengths_and_value_width(is_causal, L, S):
    q, k, v = _qkv(2, L=L, S=S, D=4, Dv=6)
    out = tiled_attention(q, k, v, is_causal=is_causal, block_q=3, block_k=4, scale=0.3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3)
    torch.testing.assert_close(out, ref)


def test_float32_within_float32_tolerance():
    q, k, v = _qkv(1, 4, L=300, S=300, D=16, dtype=torch.float32)
    out = tiled_attention(q, k, v, is_causal=True, block_q=64, block_k=48)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_log_sum_exp():
    q, k, v = _qkv(3, L=20, S=30)
    for is_causal in (False, True):
        _, lse = tiled_attention(
            q, k, v, is_causal=is_causal, block_q=6, block_k=7, return_lse=True
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if is_causal:
            scores = scores.masked_fill(torch.ones(20, 30, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_match_torch(is_causal):
    q, k, v = (t.requires_grad_() for t in _qkv(2, L=9, S=9, D=4))
    grads = torch.autograd.grad(
        tiled_attention(q, k, v, is_causal=is_causal, block_q=4, block_k=3).square().sum(),
        (q, k, v),
    )
    ref = torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).square().sum(), (q, k, v)
    )
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)


def test_large_scores_do_not_overflow():
    q, k, v = _qkv(2, L=16, S=16)
    out = tiled_attention(q * 300, k * 300, v, block_q=4, block_k=4)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q * 300, k * 300, v))


@pytest.mark.parametrize("inplace", [False, True])
def test_online_softmax_update_equals_full_softmax(inplace):
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(4, 10, 30, generator=g, dtype=torch.float64) * 5
    value = torch.randn(4, 30, 3, generator=g, dtype=torch.float64)
    m = torch.full((4, 10), float("-inf"), dtype=torch.float64)
    row_sum, acc = (
        torch.zeros(4, 10, dtype=torch.float64),
        torch.zeros(4, 10, 3, dtype=torch.float64),
    )
    for j0 in (0, 7, 19):  # uneven blocks
        block = scores[..., j0 : {0: 7, 7: 19, 19: 30}[j0]].clone()
        m, row_sum, acc = online_softmax_update(
            m, row_sum, acc, block, value[:, j0 : {0: 7, 7: 19, 19: 30}[j0]], inplace=inplace
        )
    torch.testing.assert_close(m, scores.amax(-1))
    torch.testing.assert_close(row_sum, torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1))
    torch.testing.assert_close(acc / row_sum.unsqueeze(-1), torch.softmax(scores, -1) @ value)


def test_online_softmax_update_leaves_inputs_alone_by_default():
    scores = torch.randn(2, 5, dtype=torch.float64)
    before = scores.clone()
    m, row_sum = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    acc = torch.zeros(2, 3, dtype=torch.float64)
    online_softmax_update(m, row_sum, acc, scores, torch.randn(5, 3, dtype=torch.float64))
    assert torch.equal(scores, before) and torch.equal(row_sum, torch.ones(2, dtype=torch.float64))


def test_online_softmax_update_all_masked_block_gives_no_nan():
    m = torch.full((2,), float("-inf"))
    row_sum, acc = torch.zeros(2), torch.zeros(2, 3)
    m, row_sum, acc = online_softmax_update(
        m, row_sum, acc, torch.full((2, 4), float("-inf")), torch.randn(4, 3)
    )
    assert torch.isneginf(m).all() and (row_sum == 0).all() and (acc == 0).all()
    m, row_sum, acc = online_softmax_update(m, row_sum, acc, torch.zeros(2, 4), torch.ones(4, 3))
    torch.testing.assert_close(acc / row_sum.unsqueeze(-1), torch.ones(2, 3))


@settings(max_examples=30, deadline=None)
@given(
    L=st.integers(1, 40),
    S=st.integers(1, 40),
    bq=st.integers(1, 50),
    bk=st.integers(1, 50),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_any_shape_and_blocks(L, S, bq, bk, causal, seed):
    q, k, v = _qkv(2, L=L, S=S, D=4, seed=seed)
    out = tiled_attention(q, k, v, is_causal=causal, block_q=bq, block_k=bk)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def test_measured_peak_memory_naive_quadratic_tiled_linear():
    from mha_course import scaled_dot_product_attention

    naive, tiled = [], []
    for L in (256, 512):
        q, k, v = _qkv(1, L=L, S=L, D=16, dtype=torch.float32)
        naive.append(peak_memory_bytes(lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v)))
        tiled.append(
            peak_memory_bytes(
                lambda q=q, k=k, v=v: tiled_attention(q, k, v, block_q=64, block_k=64)
            )
        )
    scores = 512 * 512 * 4
    assert naive[1] >= scores and 3.5 < naive[1] / naive[0] < 4.5  # quadratic: 2x L, 4x memory
    assert tiled[1] < scores / 4 and tiled[1] / tiled[0] < 2.5  # linear (output) + one tile


@pytest.mark.parametrize(
    "args,match",
    [
        (
            dict(query=torch.randn(2, 4, 8), key=torch.randn(2, 4, 6), value=torch.randn(2, 4, 6)),
            "key",
        ),
        (
            dict(query=torch.randn(2, 4, 8), key=torch.randn(2, 4, 8), value=torch.randn(2, 5, 8)),
            "value",
        ),
        (
            dict(query=torch.randn(2, 4, 8), key=torch.randn(3, 4, 8), value=torch.randn(3, 4, 8)),
            "key",
        ),
        (
            dict(query=torch.randn(4, 8), key=torch.randn(2, 4, 8), value=torch.randn(2, 4, 8)),
            "key",
        ),
        (
            dict(
                query=torch.ones(4, 8, dtype=torch.long),
                key=torch.randn(4, 8),
                value=torch.randn(4, 8),
            ),
            "query",
        ),
        (
            dict(
                query=torch.randn(4, 8), key=torch.randn(4, 8), value=torch.randn(4, 8), block_q=0
            ),
            "block_q",
        ),
    ],
)
def test_bad_input_names_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        tiled_attention(**args)

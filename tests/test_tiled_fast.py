"""Chapter 9, beside the lesson: the fast tiled attention equals torch's SDPA (float64)."""

import pytest
import torch
import torch.nn.functional as F

from mha_course.kernels import tiled_fast
from mha_course.kernels.tiled_fast import LAZY_MARGIN, tiled_attention_fast


def _qkv(*lead, L=37, S=37, D=8, Dv=None, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    Dv = D if Dv is None else Dv
    return (
        torch.randn(*lead, L, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, Dv, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S", [(37, 37), (10, 37), (37, 10), (1, 5)])
@pytest.mark.parametrize("block_q,block_k", [(1, 1), (7, 5), (16, 64), (100, 100)])
def test_matches_torch_sdpa(is_causal, L, S, block_q, block_k):
    q, k, v = _qkv(2, 3, L=L, S=S, Dv=5)
    out = tiled_attention_fast(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S", [(4, 0), (0, 4), (0, 0)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_no_keys_or_no_queries_as_sdpa(is_causal, L, S, dtype):
    """S = 0: every row's weights are empty, its output 0 (SDPA's and chapter 9's answer; it
    raised IndexError from amax); L = 0: an empty output."""
    q, k, v = (t.to(dtype) for t in _qkv(2, L=L, S=S, Dv=5))
    out = tiled_attention_fast(q, k, v, is_causal=is_causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert out.dtype == dtype and out.shape == want.shape == (2, L, 5)
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_growing_scores_move_the_reference(is_causal):
    # keys grow along S: each tile's scores pass the last reference by more than LAZY_MARGIN,
    # so the rescaling branch runs (and large scores must not overflow)
    q, k, v = _qkv(1, 2, L=12, S=12, D=4)
    q = q.abs() + 1.0
    k = (torch.arange(12, dtype=torch.float64) * LAZY_MARGIN).view(1, 1, 12, 1).expand(1, 2, 12, 4)
    out = tiled_attention_fast(q, k, v, is_causal=is_causal, block_q=4, block_k=3)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("diagonal_tile", [1, 3, 16])
@pytest.mark.parametrize("L,S", [(37, 37), (10, 37), (37, 10)])
@pytest.mark.parametrize("growing", [False, True], ids=["random", "growing scores"])
def test_the_diagonal_in_narrow_tiles(monkeypatch, diagonal_tile, L, S, growing):
    """Causal, a query block taller than DIAGONAL_TILE: its own keys are read in narrow tiles,
    each by the rows at or below it only (with the reference moved inside them: growing)."""
    monkeypatch.setattr(tiled_fast, "DIAGONAL_TILE", diagonal_tile)
    q, k, v = _qkv(2, 3, L=L, S=S, Dv=5)
    if growing:
        q = q.abs() + 1.0
        k = (torch.arange(S, dtype=torch.float64) * LAZY_MARGIN / 4).view(1, 1, S, 1).expand_as(k)
    for block_q, block_k in [(16, 5), (37, 64)]:
        out = tiled_attention_fast(q, k, v, is_causal=True, block_q=block_q, block_k=block_k)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)


def test_float32_and_16_bit_within_their_tolerance():
    q, k, v = _qkv(2, L=300, S=300, D=16, dtype=torch.float32)
    for dtype in (torch.float32, torch.bfloat16):
        qd, kd, vd = (t.to(dtype) for t in (q, k, v))
        out = tiled_attention_fast(qd, kd, vd, is_causal=True, block_q=64, block_k=128)
        assert out.dtype == dtype
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(
            out.float(), want, **({} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2})
        )


def test_bad_block_size_names_the_argument():
    q, k, v = _qkv(L=4, S=4)
    with pytest.raises(ValueError, match="block_k"):
        tiled_attention_fast(q, k, v, block_k=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("far_key", [0, 36], ids=["in the first tile", "in the last tile"])
def test_a_loose_bound_is_brought_down(dtype, is_causal, far_key):
    """Each row's reference starts at |q| · max |k|, which bounds its scores. A long key pointing
    away from every query makes that bound ~1000 above every score: left there, exp(s - m) would
    be 0 for every key of the row (0 / 0, in float64 too); the first tile brings it down."""
    q, k, v = _qkv(2, 3, L=37, S=37, Dv=5, dtype=dtype)
    q = q.abs() + 1.0
    k[..., far_key, :] = -1000.0  # q · k < 0 there, |k| ~ 2800
    out = tiled_attention_fast(q, k, v, is_causal=is_causal, block_q=16, block_k=5)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert torch.isfinite(out).all()
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {}
    torch.testing.assert_close(out, want, **tol)


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_tight_bound_reads_only_the_first_tile_for_its_maximum(monkeypatch, is_causal):
    """Random scores sit within LAZY_MARGIN of |q| · max |k|: one maximum per query block (its
    first tile), none for the others."""
    calls = []
    amax = torch.Tensor.amax
    monkeypatch.setattr(
        torch.Tensor, "amax", lambda t, *a, **kw: calls.append(1) or amax(t, *a, **kw)
    )
    q, k, v = _qkv(1, 2, L=64, S=64, D=16)
    out = tiled_attention_fast(q, k, v, is_causal=is_causal, block_q=16, block_k=8)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    assert len(calls) == 1 + 64 // 16  # max |k| once, then 4 query blocks (8+ tiles each)


def _long_key_far_from_the_queries(dtype, a, big):
    """Queries along feature 0, one key of length ``big`` along feature 1: |q| · max |k| is
    ``a · big``, while every score is at most ``a``."""
    q = torch.zeros(1, 1, 4, 2, dtype=dtype)
    q[..., 0] = a
    k = torch.zeros(1, 1, 8, 2, dtype=dtype)
    k[..., :7, 0] = torch.linspace(0.5, 1.0, 7, dtype=dtype)
    k[..., 7, 1] = big
    return q, k, torch.randn(1, 1, 8, 3, generator=torch.Generator().manual_seed(0), dtype=dtype)


def _bound_overflows(dtype):
    """|q| and |k| squared overflow float32 (3e19 ** 2), the scores do not."""
    q = torch.zeros(1, 1, 3, 2, dtype=dtype)
    q[..., 0] = 3e19
    k = torch.zeros(1, 1, 3, 2, dtype=dtype)
    k[..., 1] = torch.tensor([1.0, 2.0, 3.0])
    k[..., 0] = torch.tensor([0.0, 1e-18, 2e-18])
    return q, k, torch.randn(1, 1, 3, 2, generator=torch.Generator().manual_seed(0), dtype=dtype)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda: _long_key_far_from_the_queries(torch.float32, 200.0, 1e8),
        lambda: _long_key_far_from_the_queries(torch.float64, 1000.0, 1e16),
        lambda: _bound_overflows(torch.float32),
        lambda: _bound_overflows(torch.bfloat16),
    ],
    ids=["bound 2e10 float32", "bound 1e19 float64", "bound overflows float32", "bfloat16"],
)
def test_a_huge_or_infinite_bound_starts_again_from_the_scores(make, is_causal):
    """Found in review: a reference brought down by ``m + (s - m)`` kept the rounding of a bound
    ~1e10 (float32) and gave NaN; a bound whose squares overflow was inf - inf = NaN. A loose
    block starts again from its first tile's own maximum, as the teaching version."""
    q, k, v = make()
    out = tiled_attention_fast(q, k, v, is_causal=is_causal, scale=1.0, block_q=4, block_k=4)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=1.0)
    assert torch.isfinite(out).all()
    tol = {"rtol": 2e-2, "atol": 2e-2} if q.dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, want, **tol)

"""Chapter 16, beside the lesson: products taken from int8 codes (``mha_course.caches.int8_products``)
are exact integer products of the rounded float side: the scores those of the rounded query, the
weighted values within half the last level's step of every weight, long sums exact in chunks."""

import pytest
import torch

from mha_course import QuantizedKVCache, dequantize, quantize
from mha_course.caches import int8_products
from mha_course.caches.int8_products import (
    attend_in_int8,
    int8_scores,
    int8_weighted_values,
    rows_to_int8,
)

f64 = torch.float64


def _codes(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-127, 128, shape, generator=g, dtype=torch.int8)


@pytest.mark.parametrize("n,R,S,D", [(1, 1, 37, 8), (3, 4, 5, 16), (2, 2, 1, 3)])
def test_scores_are_those_of_the_rounded_query(n, R, S, D):
    q = torch.randn(n, R, D, dtype=f64, generator=torch.Generator().manual_seed(1))
    q[0, 0] = 0.0  # an all-zero row: scale 1, codes 0, scores 0
    codes = _codes(n, S, D)
    a, scale = rows_to_int8(q)
    assert a.abs().max() <= 127 and (a[0, 0] == 0).all()
    assert ((a.double() * scale - q).abs() <= scale / 2 * (1 + 1e-12)).all()  # half a step
    want = (a.double() * scale) @ codes.double().transpose(1, 2)
    torch.testing.assert_close(int8_scores(q, codes), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("n,R,S,Dv", [(1, 1, 4096, 64), (3, 2, 37, 5)])
def test_weighted_values_within_half_the_last_step(monkeypatch, levels, n, R, S, Dv):
    """|error| <= max|w| / (2 · 127 · 254^(levels - 1)) · sum |v| per output; three levels (the
    default) are within float32's rounding of the largest weight."""
    monkeypatch.setattr(int8_products, "LEVELS", levels)
    g = torch.Generator().manual_seed(2)
    weights = torch.softmax(3 * torch.randn(n, R, S, dtype=f64, generator=g), dim=-1)
    codes = _codes(n, S, Dv, seed=3)
    exact = weights @ codes.double()
    got = int8_weighted_values(weights, codes)
    half_step = weights.amax(-1, keepdim=True) / (2 * 127 * 254 ** (levels - 1))  # (n, R, 1)
    bound = half_step * codes.double().abs().sum(1, keepdim=True)  # (n, R, 1) * (n, 1, Dv)
    assert ((got - exact).abs() <= bound * (1 + 1e-9)).all()
    if levels == 3:
        assert (
            (got - exact).abs()
            <= weights.amax(-1, keepdim=True) * 2**-24 * codes.double().abs().sum(1, keepdim=True)
        ).all()


def test_long_sums_are_exact_in_chunks(monkeypatch):
    """Past INT32_SAFE_TERMS products an int32 sum could overflow: it is taken in chunks."""
    w = torch.rand(2, 3, 37, dtype=f64, generator=torch.Generator().manual_seed(4))
    codes = _codes(2, 37, 5, seed=5)
    whole = int8_weighted_values(w, codes)
    monkeypatch.setattr(int8_products, "INT32_SAFE_TERMS", 5)  # 8 chunks of <= 5 keys
    torch.testing.assert_close(int8_weighted_values(w, codes), whole, rtol=1e-15, atol=1e-15)
    monkeypatch.undo()  # the real limit: a sum past 2**31, which one int32 product wraps
    K = int8_products.INT32_SAFE_TERMS * 2 + 10
    a = torch.full((1, K), 127, dtype=torch.int8)
    b = torch.full((K, 1), 127, dtype=torch.int8)
    assert K * 127**2 > 2**31 and int8_products._int_mm(a, b).item() == K * 127**2


@pytest.mark.parametrize("safe_terms", [None, 5])  # one int32 product a pair; chunked sums
def test_pair_counts_must_match_and_no_pairs_is_empty(monkeypatch, safe_terms):
    """Each pair's product is written into its slice of one output: rows and codes for different
    numbers of pairs would leave slices unwritten, so they are refused by name."""
    if safe_terms is not None:
        monkeypatch.setattr(int8_products, "INT32_SAFE_TERMS", safe_terms)
    with pytest.raises(ValueError, match=r"as many \(sequence, head\) pairs.*got 3 .* and 2"):
        int8_scores(torch.randn(3, 2, 8, dtype=f64), _codes(2, 6, 8))
    with pytest.raises(ValueError, match=r"as many \(sequence, head\) pairs.*got 3 .* and 2"):
        int8_weighted_values(torch.rand(3, 2, 6, dtype=f64), _codes(2, 6, 8))
    empty = int8_scores(torch.randn(0, 2, 8, dtype=f64), _codes(0, 6, 8))
    assert empty.shape == (0, 2, 6) and empty.dtype == f64


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_query_or_weight_is_not_finite_after(bad):
    """As in float arithmetic: a NaN or inf in a row makes what it multiplies not finite (an
    int8 code cannot hold it; the row's scale does)."""
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 3, 8, dtype=f64, generator=g)
    q[1, 2, 5] = bad
    scores = int8_scores(q, _codes(2, 7, 8))
    assert not torch.isfinite(scores[1, 2]).any() and torch.isfinite(scores[0]).all()
    w = torch.rand(2, 3, 7, dtype=f64, generator=g)
    w[0, 1, 3] = bad
    out = int8_weighted_values(w, _codes(2, 7, 5))
    assert not torch.isfinite(out[0, 1]).any() and torch.isfinite(out[1]).all()


def test_subnormal_rows_saturate_instead_of_wrapping():
    """A row of float32 subnormals: amax / 127 rounds down, and x / scale reaches 142, which
    int8 would wrap to -114 (a flipped sign); it is held at 127."""
    x = torch.tensor([[[-3.85357e-43, 2.67648e-43, -1.96182e-44, 7.93135e-43]]])
    codes, _ = rows_to_int8(x)
    assert codes.tolist() == [[[-69, 48, -4, 127]]]


@pytest.mark.parametrize("G", [4, 2, 1])
def test_attend_in_int8_is_attention_with_the_query_rounded(G):
    """Both products from the codes, each query row (times the scale) rounded per row == SDPA
    over the dequantized cache with that rounded query (the weights' three levels keep it to
    about float32's rounding); within 1 % of the exact path, ``attend``. (The README's 1e-2 is
    against float attention over the unquantized cache: another reference.)"""
    from mha_course import scaled_dot_product_attention
    from mha_course.ops.masks import causal_mask

    torch.manual_seed(2)
    B, H, D = 2, 4, 8
    cache = QuantizedKVCache(8)
    for L in (5, 1, 3):
        k, v = (torch.randn(B, G, L, D, dtype=f64) for _ in "kv")
        q = torch.randn(B, H, L, D, dtype=f64)
        k_all, v_all = cache.update(k, v)
        S = k_all.shape[2]
        q_hat = dequantize(*quantize(q * D**-0.5))  # one scale per (b, h, l) row
        mask = causal_mask(L, S, offset=S - L)
        want = scaled_dot_product_attention(
            q_hat, k_all, v_all, attn_mask=mask, scale=1.0, enable_gqa=G != H
        )
        got = attend_in_int8(cache, q)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        exact = cache.attend(q)
        assert not torch.equal(got, exact)  # the query's rounding is there
        assert ((got - exact).norm() / exact.norm()).item() < 1e-2


@pytest.mark.parametrize(
    "make_cache,query,expect",
    [
        (lambda: QuantizedKVCache(4), torch.randn(1, 1, 1, 8), "cache: .*QuantizedKVCache.*bits=4"),
        (lambda: "a cache", torch.randn(1, 1, 1, 8), "cache: .*got str"),
        (lambda: QuantizedKVCache(8), torch.randn(1, 1, 1, 8, device="meta"), "query: .*CPU.*meta"),
        (lambda: QuantizedKVCache(8), torch.randn(1, 1, 1, 5), r"query: expected shape"),
    ],
    ids=["4-bit", "not a cache", "not a CPU", "wrong D"],
)
def test_attend_in_int8_names_what_it_needs(make_cache, query, expect):
    cache = make_cache()
    if isinstance(cache, QuantizedKVCache):
        cache.update(torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8))
    with pytest.raises(ValueError, match=expect):
        attend_in_int8(cache, query)

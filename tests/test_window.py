"""Chapter 14: the banded mask, the ring-buffer ``SlidingWindowCache`` (decode == full forward with
the banded mask, for MHA/GQA/MQA, with and without RoPE and sinks), the receptive field of a stack,
and the cache bytes of local/global layouts (measured == formula)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from mha_course import (
    KVCache,
    MultiHeadAttention,
    SlidingWindowCache,
    causal_mask,
    kv_cache_bytes,
    layout_cache_bytes,
    receptive_field,
    scaled_dot_product_attention,
    sliding_window_mask,
)

B, T, E, H = 2, 13, 16, 4
SCHEDULES = {"token-by-token": [1] * T, "chunk-longer-than-W-then-tokens": [9, 2, 1, 1]}


def decode(m, x, sizes, cache):
    outs, start = [], 0
    for n in sizes:
        outs.append(m(x[:, start : start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    assert start == x.shape[1]
    return torch.cat(outs, dim=1)  # chunks (B, n, E) -> (B, T, E)


def test_mask_matches_the_definition_elementwise():
    W, n, off = 3, 2, 4
    m = sliding_window_mask(5, window=W, offset=off, num_sink=n)
    assert m.shape == (5, 9)
    for i in range(5):
        for j in range(9):
            p = i + off
            assert bool(m[i, j]) == (j <= p and (p - j < W or j < n))


def test_mask_is_causal_when_the_window_covers_everything():
    assert torch.equal(sliding_window_mask(6, 9, window=9, offset=3), causal_mask(6, 9, offset=3))
    assert not torch.equal(
        sliding_window_mask(6, 9, window=8, offset=3), causal_mask(6, 9, offset=3)
    )


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_bad_window_raises(bad):
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(3, window=bad)
    with pytest.raises(ValueError, match="window"):
        SlidingWindowCache(bad)


def test_bad_num_sink_raises():
    with pytest.raises(ValueError, match="num_sink"):
        SlidingWindowCache(4, num_sink=-1)


@pytest.mark.parametrize("rope", [None, "half"])
@pytest.mark.parametrize("num_sink", [0, 2])
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_ring_decode_equals_full_forward_with_banded_mask(schedule, impl, G, num_sink, rope):
    torch.manual_seed(0)
    W = 4
    m = MultiHeadAttention(E, H, num_kv_heads=G, impl=impl, rope=rope, dtype=torch.float64).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    full = m(x, attn_mask=sliding_window_mask(T, window=W, num_sink=num_sink))[0]
    cache = SlidingWindowCache(W, num_sink=num_sink)
    assert_close(decode(m, x, SCHEDULES[schedule], cache), full, rtol=1e-12, atol=1e-12)
    assert cache.length == T and cache.num_cached == W + num_sink
    # and it is not just causal attention: the window really cut something off
    assert (full - m(x, is_causal=True)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("G", [None, 1], ids=["MHA", "MQA"])
def test_equal_to_full_attention_while_length_fits_the_window(G):
    torch.manual_seed(1)
    m = MultiHeadAttention(E, H, num_kv_heads=G, dtype=torch.float64).eval()
    x = torch.randn(B, 7, E, dtype=torch.float64)
    ring, dense = SlidingWindowCache(7), KVCache()
    assert_close(
        decode(m, x, [3, 1, 1, 1, 1], ring),
        decode(m, x, [3, 1, 1, 1, 1], dense),
        rtol=1e-12,
        atol=1e-12,
    )


def test_matches_the_dense_reference_function_per_head():
    """Against mha_course.scaled_dot_product_attention on the cache's own keys (no module)."""
    torch.manual_seed(2)
    W, n = 3, 1
    k, v = (
        torch.randn(1, 2, 10, 4, dtype=torch.float64),
        torch.randn(1, 2, 10, 4, dtype=torch.float64),
    )
    q = torch.randn(1, 2, 10, 4, dtype=torch.float64)
    want = scaled_dot_product_attention(
        q, k, v, attn_mask=sliding_window_mask(10, window=W, num_sink=n)
    )
    cache, got = SlidingWindowCache(W, num_sink=n), []
    for t in range(10):
        kk, vv = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert kk.shape[2] <= W + n + 1
        got.append(
            scaled_dot_product_attention(
                q[:, :, t : t + 1], kk, vv, attn_mask=cache.restrict_mask(None, 1)
            )
        )
    assert_close(torch.cat(got, dim=2), want, rtol=1e-12, atol=1e-12)


def test_ring_slots_wrap():
    cache = SlidingWindowCache(3)
    for t in range(7):
        cache.update(torch.full((1, 1, 1, 1), float(t)), torch.zeros(1, 1, 1, 1))
    assert cache.slot_position.tolist() == [6, 4, 5]  # slot = position % W
    assert cache.key.flatten().tolist() == [6.0, 4.0, 5.0]


def test_user_mask_is_narrowed_to_the_kept_keys():
    """A key padding mask over all positions still applies to the kept ones."""
    torch.manual_seed(3)
    m = MultiHeadAttention(E, H, dtype=torch.float64).eval()
    x = torch.randn(1, 6, E, dtype=torch.float64)
    pad = torch.zeros(1, 6, dtype=torch.bool)
    pad[0, 4] = True
    mask = sliding_window_mask(6, window=3) & ~pad[0][None, :]
    full = m(x, attn_mask=mask)[0]
    cache = SlidingWindowCache(3)
    out = [
        m(x[:, t : t + 1], kv_cache=cache, is_causal=True, key_padding_mask=pad[:, : t + 1])[0]
        for t in range(6)
    ]
    assert_close(torch.cat(out, 1)[:, 5], full[:, 5], rtol=1e-12, atol=1e-12)


def test_memory_is_fixed_and_matches_the_formula():
    m = MultiHeadAttention(E, H, num_kv_heads=2, dtype=torch.float64).eval()
    cache = SlidingWindowCache(5, num_sink=2)
    for t in range(20):
        m(torch.randn(B, 1, E, dtype=torch.float64), kv_cache=cache, is_causal=True)
        assert cache.allocated_bytes == kv_cache_bytes(
            1, 2, E // H, 7, B, torch.float64
        )  # allocated once
        assert cache.nbytes == kv_cache_bytes(1, 2, E // H, min(t + 1, 7), B, torch.float64)  # held


def test_layout_bytes():
    G, D, S = 8, 128, 32768
    local = kv_cache_bytes(1, G, D, 1024)
    glob = kv_cache_bytes(1, G, D, S)
    layout = [1024] * 5 + [None]
    assert layout_cache_bytes(layout, G, D, S) == 5 * local + glob
    assert layout_cache_bytes([None] * 6, G, D, S) == kv_cache_bytes(6, G, D, S)
    assert layout_cache_bytes(layout, G, D, 100) == kv_cache_bytes(6, G, D, 100)


def test_receptive_field_grows_by_w_minus_one_per_layer():
    """Gradient of the last output w.r.t. the inputs is nonzero exactly on the last
    num_layers * (W - 1) + 1 positions."""
    torch.manual_seed(4)
    W, n_layers, T_ = 3, 4, 16
    layers = [MultiHeadAttention(E, H, dtype=torch.float64) for _ in range(n_layers)]
    x = torch.randn(1, T_, E, dtype=torch.float64, requires_grad=True)
    mask = sliding_window_mask(T_, window=W)
    h = x
    for layer in layers:
        h = h + layer(h, attn_mask=mask)[0]
    h[0, -1].sum().backward()
    reached = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten()
    assert reached.tolist() == list(range(T_ - receptive_field(n_layers, W), T_))

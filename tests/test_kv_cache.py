"""``KVCache``: incremental decoding equals the full causal forward (token by token, a prompt chunk
then tokens, chunks of uneven sizes) for MHA, GQA and MQA and both kernels; and the cache's own
bookkeeping (length, bytes, reset)."""

from __future__ import annotations

import pytest
import torch
from conftest import TOL, TOL64
from torch.testing import assert_close

from mha_course import KVCache, MultiHeadAttention

B, T, E, H = 2, 9, 12, 4
SCHEDULES = {
    "token-by-token": [1] * T,
    "prompt-then-tokens": [5, 1, 1, 1, 1],
    "uneven-chunks": [2, 3, 1, 3],
}


def decode(m, x, sizes, cache, **kw):
    """Feed ``x`` through ``m`` in consecutive chunks of the given sizes, reusing ``cache``."""
    outs, start = [], 0
    for n in sizes:
        outs.append(m(x[:, start : start + n], is_causal=True, kv_cache=cache, **kw)[0])
        start += n
    assert start == x.shape[1]
    return torch.cat(outs, dim=1)  # chunks (B, n, E) -> (B, T, E)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_decoding_equals_full_causal_forward(impl, G, schedule, dtype):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=G, impl=impl, dtype=dtype).eval()
    x = torch.randn(B, T, E, dtype=dtype)
    full = m(x, is_causal=True)[0]
    cache = KVCache()
    tol = TOL[dtype]
    assert_close(decode(m, x, SCHEDULES[schedule], cache), full, **tol)
    G = H if G is None else G
    assert cache.length == len(cache) == T
    assert cache.key.shape == cache.value.shape == (B, G, T, E // H)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_decoding_with_need_weights_and_padding(impl):
    """Weights of a decoded token equal the last row of the full causal map; a key padding mask
    spans cached + new positions."""
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=2, impl=impl, dtype=torch.float64).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, 0] = True  # sequence 1 is left-padded by one token
    full, full_w = m(x, is_causal=True, key_padding_mask=kpm, need_weights=True)
    cache = KVCache()
    m(x[:, :6], is_causal=True, kv_cache=cache, key_padding_mask=kpm[:, :6])
    out, w = m(
        x[:, 6:7], is_causal=True, kv_cache=cache, key_padding_mask=kpm[:, :7], need_weights=True
    )
    assert w.shape == (B, H, 1, 7)
    assert_close(out, full[:, 6:7], **TOL64)
    assert_close(w[..., 0, :], full_w[..., 6, :7], **TOL64)


def test_without_is_causal_a_chunk_sees_its_own_future():
    """The cache offsets the causal mask only when asked: a 3-token chunk without is_causal lets
    its first token see the other two, so the result differs from the causal forward."""
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, dtype=torch.float64).eval()
    x = torch.randn(B, 5, E, dtype=torch.float64)
    cache = KVCache()
    m(x[:, :2], is_causal=True, kv_cache=cache)
    out = m(x[:, 2:], kv_cache=cache)[0]
    assert not torch.allclose(out, m(x, is_causal=True)[0][:, 2:])


def test_cache_bookkeeping():
    cache = KVCache()
    assert cache.length == 0 and len(cache) == 0 and cache.nbytes == 0
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 7)  # Dv = 7 != D = 5
    k, v = cache.update(k1, v1)
    assert torch.equal(k, k1) and torch.equal(v, v1)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 7)
    k, v = cache.update(k2, v2)
    assert k.shape == (2, 3, 5, 5) and v.shape == (2, 3, 5, 7)
    assert torch.equal(k[:, :, 4:], k2) and torch.equal(v[:, :, :4], v1)
    assert cache.length == 5
    assert cache.nbytes == (2 * 3 * 5 * 5 + 2 * 3 * 5 * 7) * 4  # float32: 4 bytes each
    cache.reset()
    assert cache.length == 0 and cache.key is None and cache.nbytes == 0
    cache.update(torch.randn(1, 1, 2, 3), torch.randn(1, 1, 2, 3))  # a new shape after reset
    assert cache.length == 2


@pytest.mark.parametrize("bad", ["attn_mask", "key_padding_mask", "head_mask"])
def test_a_rejected_call_leaves_the_cache_unchanged(bad):
    """Masks are checked before the cache grows, so fixing the call and retrying still decodes
    correctly."""
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=2, dtype=torch.float64).eval()
    x = torch.randn(B, 4, E, dtype=torch.float64)
    cache = KVCache()
    m(x[:, :3], is_causal=True, kv_cache=cache)
    wrong = {
        "attn_mask": torch.ones(1, 3, dtype=torch.bool),  # S should be 4 (3 cached + 1)
        "key_padding_mask": torch.zeros(B, 1, dtype=torch.bool),
        "head_mask": torch.ones(H + 1, dtype=torch.float64),
    }
    with pytest.raises(ValueError, match=bad):
        m(x[:, 3:], is_causal=True, kv_cache=cache, **{bad: wrong[bad]})
    assert cache.length == 3
    out = m(x[:, 3:], is_causal=True, kv_cache=cache)[0]
    assert_close(out, m(x, is_causal=True)[0][:, 3:], **TOL64)

"""RenumberedSinkCache (chapter 14): StreamingLLM's positions inside the cache, against an
independent float64 oracle that renumbers the kept tokens and attends with torch's SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from mha_course import MultiHeadAttention, SlidingWindowCache
from mha_course.caches.sink import RenumberedSinkCache
from mha_course.ops.rope import apply_rope

E, H = 32, 4


def oracle(m: MultiHeadAttention, x: torch.Tensor, window: int, num_sink: int) -> torch.Tensor:
    """Step t: keep tokens < num_sink and the last ``window`` up to t, number them 0 … K−1 in
    text order, rotate queries (at K − 1) and keys by those numbers, attend (SDPA)."""
    B, T, _ = x.shape
    G, D = m.num_kv_heads, E // H
    q = m.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, T, E) -> (B, H, T, D)
    k = m.k_proj(x).view(B, T, G, D).transpose(1, 2)  # (B, T, E_kv) -> (B, G, T, D)
    v = m.v_proj(x).view(B, T, G, D).transpose(1, 2)
    outs = []
    for t in range(T):
        kept = sorted(
            {j for j in range(min(num_sink, t + 1))} | set(range(max(0, t - window + 1), t + 1))
        )
        idx = torch.arange(len(kept), dtype=x.dtype)
        kq = apply_rope(k[:, :, kept], idx, layout=m.rope, base=m.rope_base)
        qq = apply_rope(q[:, :, t : t + 1], idx[-1:], layout=m.rope, base=m.rope_base)
        o = F.scaled_dot_product_attention(qq, kq, v[:, :, kept], enable_gqa=G != H)  # (B, H, 1, D)
        outs.append(m.out_proj(o.transpose(1, 2).reshape(B, 1, H * D)))
    return torch.cat(outs, dim=1)  # T x (B, 1, E) -> (B, T, E)


def decode(m, x, sizes, cache):
    outs, start = [], 0
    for n in sizes:
        outs.append(m(x[:, start : start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("G", [4, 2, 1])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_matches_renumbering_oracle(G, layout):
    torch.manual_seed(G)
    T, W, n = 24, 5, 2
    m = MultiHeadAttention(
        E, H, num_kv_heads=G, rope=layout, rope_base=500.0, dtype=torch.float64
    ).eval()
    x = torch.randn(2, T, E, dtype=torch.float64)
    with torch.no_grad():
        want = oracle(m, x, W, n)
        for sizes in ([1] * T, [W + n] + [1] * (T - W - n)):  # token by token; a prompt that fits
            cache = RenumberedSinkCache(W, n, rope=layout, rope_base=500.0)
            assert_close(decode(m, x, sizes, cache), want, rtol=1e-12, atol=1e-12)


def test_absolute_positions_differ_from_streamingllm():
    """The control: the course's SlidingWindowCache (sinks at their text positions) is not the
    oracle once the sinks are far — so the test above can fail."""
    torch.manual_seed(0)
    T, W, n = 24, 5, 2
    m = MultiHeadAttention(E, H, rope="half", dtype=torch.float64).eval()
    x = torch.randn(1, T, E, dtype=torch.float64)
    with torch.no_grad():
        gap = (decode(m, x, [1] * T, SlidingWindowCache(W, n)) - oracle(m, x, W, n)).abs()
    assert gap[:, : W + n].max() < 1e-12  # identical while the text fits the cache
    assert gap[:, W + n :].max() > 1e-3


def test_without_sinks_equals_the_window_cache():
    """With no sinks renumbering keeps every distance: the plain ring buffer's output."""
    torch.manual_seed(1)
    m = MultiHeadAttention(E, H, num_kv_heads=2, rope="half", dtype=torch.float64).eval()
    x = torch.randn(2, 30, E, dtype=torch.float64)
    with torch.no_grad():
        a = decode(m, x, [1] * 30, RenumberedSinkCache(6, 0, rope="half"))
        b = decode(m, x, [1] * 30, SlidingWindowCache(6))
    assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_errors_and_reset():
    with pytest.raises(ValueError, match="rope"):
        RenumberedSinkCache(4, 1, rope="spiral")
    with pytest.raises(ValueError, match="rope_base"):
        RenumberedSinkCache(4, 1, rope_base=1)
    cache = RenumberedSinkCache(4, 1, rope="interleaved", rope_base=50.0)
    m = MultiHeadAttention(E, H, rope="interleaved", rope_base=50.0).eval()
    with torch.no_grad():
        m(torch.randn(1, 5, E), is_causal=True, kv_cache=cache)  # fits: W + n = 5
        with pytest.raises(ValueError, match="one at a time"):
            m(torch.randn(1, 2, E), is_causal=True, kv_cache=cache)
    cache.reset()
    assert (cache.length, cache.rope, cache.rope_base) == (0, "interleaved", 50.0)

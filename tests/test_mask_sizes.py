"""Caches report their mask sizes (transformers' get_mask_sizes): before an update of L tokens,
``mask_positions(L)`` names the keys the update will return, so MultiHeadAttention builds every
mask once at that size instead of over every position seen and then cut."""

from __future__ import annotations

import pytest
import torch

import mha_course.attention.inputs as inputs_module
from mha_course import KVCache, MultiHeadAttention, RenumberedSinkCache, SlidingWindowCache
from mha_course.ops.masks import causal_mask

f64 = torch.float64


@pytest.mark.parametrize(
    "make",
    [
        lambda: SlidingWindowCache(5),
        lambda: SlidingWindowCache(4, num_sink=2),
        lambda: RenumberedSinkCache(6, num_sink=1),
    ],
)
def test_mask_positions_name_the_keys_the_update_returns(make):
    cache, g = make(), torch.Generator().manual_seed(0)
    for L in (3, 1, 1, 4, 1, 1, 1, 2, 1, 1):
        if isinstance(cache, RenumberedSinkCache) and cache.length + L > 7:
            L = 1  # renumbered positions take one query at a time once the text outgrows the cache
        want = cache.mask_positions(L)
        cache.update(*(torch.randn(1, 2, L, 4, generator=g, dtype=f64) for _ in range(2)))
        assert torch.equal(want, cache.key_positions)


def test_a_cache_that_keeps_everything_reports_no_positions():
    assert KVCache().mask_positions(3) is None


def test_decoding_through_a_window_never_builds_a_mask_over_every_position(monkeypatch):
    """A thousand tokens through a window of 8: each step's mask is (1, S_read) at most 9 wide;
    the full causal mask (1, length) is never built (it was, and then cut)."""
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2, dtype=f64)
    x = torch.randn(1, 40, 16, dtype=f64)
    full, _ = m(x, is_causal=True, attn_mask=None)  # reference without a cache below
    widths = []
    real = inputs_module.combine_masks

    def spy(*masks, **kw):
        widths.extend(t.shape[-1] for t in masks if t is not None)
        return real(*masks, **kw)

    monkeypatch.setattr(inputs_module, "combine_masks", spy)
    monkeypatch.setattr(
        inputs_module, "causal_mask", lambda *a, **k: pytest.fail("full causal mask built")
    )
    cache = SlidingWindowCache(8)
    pad = torch.zeros(1, 40, dtype=torch.bool)  # a padding mask over every position seen
    outs = []
    for t in range(40):
        y, _ = m(x[:, t : t + 1], is_causal=True, kv_cache=cache, key_padding_mask=pad[:, : t + 1])
        outs.append(y)
    assert max(widths) <= 9
    # the same answer as the full forward with the window's band (chapter 14's equality)
    from mha_course import sliding_window_mask

    monkeypatch.undo()
    want, _ = m(x, attn_mask=sliding_window_mask(40, window=8))
    torch.testing.assert_close(torch.cat(outs, 1), want)
    assert causal_mask(2, 2).shape == (2, 2) and full.shape == want.shape

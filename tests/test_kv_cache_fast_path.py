"""Issue 33: a cache skips re-checking a decode step like the last one — and only that."""

import pytest
import torch

from mha_course import KVCache, MultiHeadAttention
from mha_course.caches.static import StaticKVCache


def _kv(S, D=4, dtype=torch.float32):
    return torch.randn(1, 2, S, D, dtype=dtype), torch.randn(1, 2, S, D, dtype=dtype)


@pytest.mark.parametrize("make", [KVCache, lambda: StaticKVCache(16)])
@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: _kv(1, D=5), "key"),  # another head size than the cache holds
        (lambda: _kv(1, dtype=torch.float64), "key"),  # another dtype
        (lambda: (_kv(1)[0], torch.randn(1, 2, 2, 4)), "value"),  # value's S differs
        (lambda: (_kv(1)[0], "not a tensor"), "value"),
    ],
)
def test_a_bad_step_after_good_decode_steps_still_raises(make, bad, match):
    cache = make()
    cache.update(*_kv(3))  # prefill
    for _ in range(3):  # decode steps: the second and third skip the checks
        cache.update(*_kv(1))
    with pytest.raises(ValueError, match=match):
        cache.update(*bad())
    assert cache.length == 6  # the bad call changed nothing


def test_kv_cache_rechecks_when_its_tensors_were_replaced():
    cache = KVCache()
    cache.update(*_kv(2))
    cache.update(*_kv(1))
    cache.key, cache.value = _kv(3, D=5)  # replaced from outside: the next step is checked again
    with pytest.raises(ValueError, match="key"):
        cache.update(*_kv(1))


@pytest.mark.parametrize("make", [KVCache, lambda: StaticKVCache(16)])
def test_decode_fast_path_equals_one_causal_forward(make):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 7, 16)
    want, _ = mha(x, is_causal=True)
    cache = make()
    outs = [mha(x[:, :3], is_causal=True, kv_cache=cache)[0]]
    outs += [mha(x[:, t : t + 1], is_causal=True, kv_cache=cache)[0] for t in range(3, 7)]
    assert mha.dispatch == ("sdpa", None)
    torch.testing.assert_close(torch.cat(outs, dim=1), want)


@pytest.mark.parametrize("kept", [0, 3, 256])  # no kept views; some then cut; all kept
def test_static_cache_kept_views_hold_what_kv_cache_holds(monkeypatch, kept):
    """StaticKVCache keeps each position's views (VIEWS_KEPT); before, across and past that bound,
    and in a second sequence reusing the same buffers and views, it returns exactly KVCache's
    keys and values (float64)."""
    monkeypatch.setattr("mha_course.caches.static.VIEWS_KEPT", kept)
    torch.manual_seed(0)
    static = StaticKVCache(9)
    for prefill in (2, 4):  # two sequences in the same buffers
        dense = KVCache()
        static.reset()
        for S in (prefill,) + (1,) * (9 - prefill):
            k, v = _kv(S, dtype=torch.float64)
            got, want = static.update(k, v), dense.update(k, v)
            assert all(torch.equal(g, w) for g, w in zip(got, want))
        assert static.length == 9
    assert len(static._slots) == min(9, kept)  # the kept views were made, and no more


def test_static_cache_switches_between_no_grad_and_gradients():
    """Views kept under no_grad are never written with gradients on (torch forbids it): a cache
    filled while decoding, then used in a forward that trains, gives the gradients of KVCache."""
    torch.manual_seed(0)
    static, dense = StaticKVCache(8), KVCache()
    with torch.no_grad():  # decode: the kept views are made
        for S in (3, 1, 1):
            static.update(*_kv(S, dtype=torch.float64))  # the same buffers as below
    static.reset()
    k0, k1 = (torch.randn(1, 2, S, 4, dtype=torch.float64, requires_grad=True) for S in (3, 1))
    grads = []
    for cache in (static, dense):
        cache.update(k0, k0 * 2)
        k, v = cache.update(k1, k1 * 3)
        grads.append(torch.autograd.grad((k * v).sum(), (k0, k1)))
    for g_static, g_dense in zip(*grads):
        torch.testing.assert_close(g_static, g_dense)
    with torch.inference_mode():  # and inference mode slices as before
        static.reset()
        for S in (2, 1):
            static.update(*_kv(S))
    assert static.length == 3

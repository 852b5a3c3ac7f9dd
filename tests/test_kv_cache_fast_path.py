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

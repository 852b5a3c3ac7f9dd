"""The one registry of attention functions (mha_course.attention.functions): every entry equals
torch's SDPA in float64 with one signature, MultiHeadAttention(impl=...) picks from it, and a call
a function cannot serve runs eager and says why (as torch's why_not_fast_path)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mha_course import KVCache, MultiHeadAttention
from mha_course.attention.functions import ATTENTION_FUNCTIONS, attention_function

f64 = torch.float64
NAMES = sorted(ATTENTION_FUNCTIONS)


def _qkv(G=2, H=4, L=24, S=24, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, H, L, D, generator=g, dtype=f64)
    k, v = (torch.randn(2, G, S, D, generator=g, dtype=f64) for _ in range(2))
    return q, k, v


def _available(name):
    if name == "triton":
        pytest.importorskip("triton")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("G", [4, 2, 1])
def test_every_function_equals_torch_sdpa(name, is_causal, G):
    _available(name)
    q, k, v = _qkv(G=G)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=G != 4)
    got = ATTENTION_FUNCTIONS[name].run(q, k, v, is_causal=is_causal, enable_gqa=G != 4)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("impl", NAMES)
def test_multi_head_attention_picks_from_the_registry_and_agrees_with_eager(impl):
    _available(impl)
    torch.manual_seed(0)
    eager = MultiHeadAttention(32, 4, num_kv_heads=2, impl="eager", dtype=f64)
    module = MultiHeadAttention(32, 4, num_kv_heads=2, impl=impl, dtype=f64)
    module.load_state_dict(eager.state_dict())
    x = torch.randn(2, 12, 32, dtype=f64)
    with torch.no_grad():
        for causal in (False, True):
            got, _ = module(x, is_causal=causal)
            assert module.dispatch == (impl, None)  # the chosen function ran
            torch.testing.assert_close(got, eager(x, is_causal=causal)[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("impl", [n for n in NAMES if not ATTENTION_FUNCTIONS[n].masks])
def test_a_call_the_function_cannot_serve_runs_eager_and_says_why(impl):
    _available(impl)
    torch.manual_seed(0)
    module = MultiHeadAttention(32, 4, impl=impl, dtype=f64)
    eager = MultiHeadAttention(32, 4, impl="eager", dtype=f64)
    eager.load_state_dict(module.state_dict())
    x = torch.randn(2, 10, 32, dtype=f64)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[0, -3:] = True
    with torch.no_grad():
        got, _ = module(x, key_padding_mask=pad)
        ran, why = module.dispatch
        assert ran == "eager" and "no attn_mask" in why and impl in why
        torch.testing.assert_close(got, eager(x, key_padding_mask=pad)[0])
        # a causal step after cached tokens is a mask (offset), not SDPA's top-left is_causal
        cache, ref = KVCache(), KVCache()
        module(x[:, :6], is_causal=True, kv_cache=cache)
        eager(x[:, :6], is_causal=True, kv_cache=ref)
        got, _ = module(x[:, 6:], is_causal=True, kv_cache=cache)
        assert module.dispatch[0] == "eager"
        torch.testing.assert_close(got, eager(x[:, 6:], is_causal=True, kv_cache=ref)[0])
        module(x, need_weights=True)
        assert module.dispatch[0] == "eager" and "weights" in module.dispatch[1]


def test_sdpa_takes_masks_itself():
    module = MultiHeadAttention(16, 2, impl="sdpa", dtype=f64)
    pad = torch.zeros(1, 5, dtype=torch.bool)
    pad[0, -1] = True
    with torch.no_grad():
        module(torch.randn(1, 5, 16, dtype=f64), key_padding_mask=pad)
    assert module.dispatch == ("sdpa", None)


def test_an_unknown_function_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"impl: expected one of .*'tiled'.*got 'fast'"):
        attention_function("fast")
    with pytest.raises(ValueError, match=r"impl: expected one of .*got 'fast'"):
        MultiHeadAttention(16, 2, impl="fast")

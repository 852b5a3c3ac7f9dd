"""RoPE and ALiBi inside ``MultiHeadAttention`` (chapter 12): decoding with a ``KVCache`` equals the
full causal forward (positions offset by the cache length), ``rope=None`` is exactly the old module,
positions break permutation equivariance, and GQA conversion / head pruning keep the positions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TOL64
from torch.testing import assert_close

from mha_course import (
    KVCache,
    MultiHeadAttention,
    alibi_bias,
    apply_rope,
    merge_heads,
    mha_to_gqa,
    prune_heads,
    split_heads,
)

B, T, E, H = 2, 9, 16, 4
SCHEDULES = {
    "token-by-token": [1] * T,
    "prompt-then-tokens": [5, 1, 1, 1, 1],
    "uneven-chunks": [2, 3, 1, 3],
}
POSITIONS = [
    {"rope": "half"},
    {"rope": "interleaved"},
    {"alibi": True},
    {"rope": "half", "alibi": True},
]


def decode(m, x, sizes, cache):
    outs, start = [], 0
    for n in sizes:
        outs.append(m(x[:, start : start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    return torch.cat(outs, dim=1)  # chunks (B, n, E) -> (B, T, E)


@pytest.mark.parametrize("kw", POSITIONS, ids=lambda kw: "+".join(kw))
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_cached_decoding_equals_full_causal_forward(kw, impl, G, schedule):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=G, impl=impl, dtype=torch.float64, **kw).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    cache = KVCache()
    assert_close(decode(m, x, SCHEDULES[schedule], cache), m(x, is_causal=True)[0], **TOL64)
    assert cache.length == T


def test_cached_keys_are_stored_rotated():
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, rope="half", dtype=torch.float64).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    cache = KVCache()
    decode(m, x, [4, 5], cache)
    k = split_heads(m.k_proj(x), H)  # (B, T, E) -> (B, H, T, D)
    assert_close(cache.key, apply_rope(k, torch.arange(T), layout="half"), **TOL64)


def test_positions_not_offset_by_the_cache_break_decoding():
    """The bug the cache offset prevents: rotating every new token as if it sat at position 0."""
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, rope="half", dtype=torch.float64).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    full = m(x, is_causal=True)[0]
    q = apply_rope(split_heads(m.q_proj(x), H), torch.zeros(T, dtype=torch.long))  # all at 0
    k = apply_rope(split_heads(m.k_proj(x), H), torch.zeros(T, dtype=torch.long))
    v = split_heads(m.v_proj(x), H)
    wrong = m.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    assert not torch.allclose(wrong, full)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_rope_none_is_exactly_the_plain_module(impl):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=2, impl=impl).eval()
    assert m.rope is None and not m.alibi and m.alibi_slopes is None
    x = torch.randn(B, T, E)
    q = split_heads(m.q_proj(x), H)  # (B, T, E) -> (B, H, T, D)
    k, v = split_heads(m.k_proj(x), 2), split_heads(m.v_proj(x), 2)  # (B, T, G*D) -> (B, G, T, D)
    if impl == "sdpa":
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        assert torch.equal(m(x, is_causal=True)[0], m.out_proj(merge_heads(ref)))
    with_rope = MultiHeadAttention(E, H, num_kv_heads=2, impl=impl, rope="half").eval()
    with_rope.load_state_dict(m.state_dict())
    assert not torch.allclose(with_rope(x, is_causal=True)[0], m(x, is_causal=True)[0])


def test_rope_equals_rotating_queries_and_keys_by_hand():
    torch.manual_seed(0)
    m = MultiHeadAttention(
        E, H, num_kv_heads=2, rope="interleaved", rope_base=50.0, impl="eager", dtype=torch.float64
    ).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    pos = torch.arange(T)
    q = apply_rope(split_heads(m.q_proj(x), H), pos, layout="interleaved", base=50.0)
    k = apply_rope(split_heads(m.k_proj(x), 2), pos, layout="interleaved", base=50.0)
    v = split_heads(m.v_proj(x), 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert_close(m(x, is_causal=True)[0], m.out_proj(merge_heads(ref)), **TOL64)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_alibi_equals_its_bias_as_a_float_mask(impl):
    torch.manual_seed(0)
    plain = MultiHeadAttention(E, H, impl=impl, dtype=torch.float64).eval()
    m = MultiHeadAttention(E, H, impl=impl, alibi=True, dtype=torch.float64).eval()
    m.load_state_dict(plain.state_dict())
    x = torch.randn(B, T, E, dtype=torch.float64)
    bias = alibi_bias(H, T, dtype=torch.float64)  # (H, T, T)
    assert_close(
        m(x, is_causal=True)[0], plain(x, is_causal=True, attn_mask=bias[None])[0], **TOL64
    )


@pytest.mark.parametrize("kw", POSITIONS[:3], ids=lambda kw: "+".join(kw))
def test_positions_break_permutation_equivariance(kw):
    torch.manual_seed(0)
    plain = MultiHeadAttention(E, H, dtype=torch.float64).eval()
    m = MultiHeadAttention(E, H, dtype=torch.float64, **kw).eval()
    m.load_state_dict(plain.state_dict())
    x = torch.randn(B, T, E, dtype=torch.float64)
    perm = torch.randperm(T)
    assert_close(plain(x[:, perm])[0], plain(x)[0][:, perm], **TOL64)
    assert not torch.allclose(m(x[:, perm])[0], m(x)[0][:, perm])


@pytest.mark.parametrize("kw", POSITIONS, ids=lambda kw: "+".join(kw))
def test_gqa_conversion_and_pruning_keep_positions(kw):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, dtype=torch.float64, **kw).eval()
    x = torch.randn(B, T, E, dtype=torch.float64)
    g = mha_to_gqa(m, 2)
    assert (g.rope, g.alibi) == (m.rope, m.alibi)
    with torch.no_grad():  # identical heads within each group: the conversion is exact
        for proj in (m.k_proj, m.v_proj):
            w = proj.weight.view(2, 2, H, -1)  # (H*D, E) -> (G, H/G, D, E)
            w[:, 1] = w[:, 0]
            proj.bias.view(2, 2, -1)[:, 1] = proj.bias.view(2, 2, -1)[:, 0]
    assert_close(mha_to_gqa(m, 2)(x, is_causal=True)[0], m(x, is_causal=True)[0], **TOL64)
    pruned = prune_heads(m, [1, 2])
    head_mask = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert_close(
        pruned(x, is_causal=True)[0], m(x, is_causal=True, head_mask=head_mask)[0], **TOL64
    )


def test_alibi_error():
    with pytest.raises(ValueError, match="alibi:"):
        MultiHeadAttention(E, H, alibi="yes")

"""Chapter 7 helpers: MHA -> GQA conversion, KV-cache bytes, query-head -> key/value-head map."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from mha_course import (
    KVCache,
    MultiHeadAttention,
    kv_cache_bytes,
    kv_group_of_query_heads,
    mean_pool_heads,
    mha_to_gqa,
    repeat_kv,
)


def _mha(E=16, H=4, G=None, bias=True, seed=0, **kw):
    torch.manual_seed(seed)
    return MultiHeadAttention(E, H, num_kv_heads=G, bias=bias, dtype=torch.float64, **kw)


def _x(B=2, T=5, E=16, seed=1):
    return torch.randn(B, T, E, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


# ---- kv_group_of_query_heads -------------------------------------------------------------
@pytest.mark.parametrize("H,G", [(8, 1), (8, 2), (8, 4), (8, 8), (6, 3)])
def test_group_map_matches_torch_enable_gqa(H, G):
    """Query head h sees exactly key/value head group[h] inside torch's enable_gqa."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, 3, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, G, 5, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, G, 5, 4, generator=g, dtype=torch.float64)
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=G != H)
    group = kv_group_of_query_heads(H, G)
    for h in range(H):
        ref = F.scaled_dot_product_attention(q[:, h], k[:, group[h]], v[:, group[h]])
        assert_close(out[:, h], ref)


def test_group_map_rejects_non_divisor():
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_group_of_query_heads(8, 3)


# ---- kv_cache_bytes ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("G", [1, 2, 4])
def test_kv_cache_bytes_equals_a_real_cache(dtype, G):
    """The formula equals the bytes a KVCache actually holds after decoding, summed over layers."""
    B, T, E, H, n_layers = 3, 7, 32, 4, 2
    torch.manual_seed(0)
    layers = [MultiHeadAttention(E, H, num_kv_heads=G, dtype=dtype) for _ in range(n_layers)]
    caches = [KVCache() for _ in layers]
    x = torch.randn(B, T, E, dtype=dtype)
    with torch.no_grad():
        for t in range(T):  # token by token, as in decoding
            for layer, cache in zip(layers, caches):
                layer(x[:, t : t + 1], is_causal=True, kv_cache=cache)
    measured = sum(c.key.nbytes + c.value.nbytes for c in caches)
    assert measured == kv_cache_bytes(n_layers, G, E // H, seq_len=T, batch=B, dtype=dtype)


def test_kv_cache_bytes_scales_linearly_and_defaults_to_bf16():
    one = kv_cache_bytes(32, 8, 128)
    assert one == kv_cache_bytes(32, 8, 128, dtype=torch.float16)
    assert 2 * one == kv_cache_bytes(32, 8, 128, dtype=torch.float32)
    assert kv_cache_bytes(32, 8, 128, seq_len=10, batch=3) == 30 * one
    assert kv_cache_bytes(32, 32, 128) == 4 * one  # G = H = 32 vs G = 8


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_kv_cache_bytes_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="num_kv_heads"):
        kv_cache_bytes(2, bad, 64)


def test_kv_cache_bytes_rejects_bad_dtype():
    with pytest.raises(ValueError, match="dtype"):
        kv_cache_bytes(2, 2, 64, dtype="bf16")


# ---- mha_to_gqa ------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_g_equals_h_returns_an_equal_module(bias):
    mha = _mha(bias=bias)
    same = mha_to_gqa(mha, 4)
    assert same is not mha and same.num_kv_heads == 4
    for (n1, p1), (n2, p2) in zip(mha.state_dict().items(), same.state_dict().items()):
        assert n1 == n2
        assert_close(p1, p2, rtol=0, atol=0)
    x = _x()
    assert_close(same(x)[0], mha(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("G", [1, 2])
def test_pooled_weights_are_the_group_means(G):
    H, E = 4, 16
    D = E // H
    mha = _mha(E, H)
    gqa = mha_to_gqa(mha, G)
    assert gqa.k_proj.weight.shape == (G * D, E) and gqa.v_proj.bias.shape == (G * D,)
    per_group = H // G
    for name in ("k_proj", "v_proj"):
        old, new = getattr(mha, name), getattr(gqa, name)
        for g in range(G):
            heads = range(g * per_group, (g + 1) * per_group)
            want_w = torch.stack([old.weight[h * D : (h + 1) * D] for h in heads]).mean(0)
            want_b = torch.stack([old.bias[h * D : (h + 1) * D] for h in heads]).mean(0)
            assert_close(new.weight[g * D : (g + 1) * D], want_w)
            assert_close(new.bias[g * D : (g + 1) * D], want_b)
    for name in ("q_proj", "out_proj"):
        assert_close(getattr(gqa, name).weight, getattr(mha, name).weight, rtol=0, atol=0)
        assert_close(getattr(gqa, name).bias, getattr(mha, name).bias, rtol=0, atol=0)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("G", [1, 2, 4])
def test_identical_heads_in_a_group_give_the_same_output(G, impl):
    """Build an MHA whose key/value heads are already copies within each group (by repeating a
    GQA module's weights); pooling must then give back exactly that GQA module's output."""
    H, E = 4, 16
    D = E // H
    small = _mha(E, H, G, impl=impl)
    mha = _mha(E, H, impl=impl, seed=5)
    with torch.no_grad():
        mha.load_state_dict(
            {k: v for k, v in small.state_dict().items() if k.startswith(("q_proj", "out_proj"))},
            strict=False,
        )
        for name in ("k_proj", "v_proj"):
            w = getattr(small, name).weight.view(G, D, E)  # (G*D, E) -> (G, D, E)
            getattr(mha, name).weight.copy_(repeat_kv(w, H // G).reshape(H * D, E))  # -> (H*D, E)
            b = getattr(small, name).bias.view(G, D)  # (G*D,) -> (G, D)
            getattr(mha, name).bias.copy_(repeat_kv(b, H // G, dim=0).reshape(H * D))  # -> (H*D,)
    x = _x()
    converted = mha_to_gqa(mha, G)
    for kw in ({}, {"is_causal": True}):
        assert_close(mha(x, **kw)[0], small(x, **kw)[0])  # the MHA really equals the GQA module
        assert_close(converted(x, **kw)[0], mha(x, **kw)[0])


def test_conversion_composes_and_keeps_cross_attention_sizes():
    """MHA -> G=2 -> G=1 equals MHA -> G=1 (means of means of equal-size groups)."""
    mha = _mha(16, 4, kdim=12, vdim=10)
    direct, two_step = mha_to_gqa(mha, 1), mha_to_gqa(mha_to_gqa(mha, 2), 1)
    q, k, v = _x(2, 3, 16), _x(2, 6, 12, seed=2), _x(2, 6, 10, seed=3)
    assert_close(two_step(q, k, v)[0], direct(q, k, v)[0])
    assert direct.k_proj.in_features == 12 and direct.v_proj.in_features == 10


def test_original_module_is_untouched_and_mode_is_kept():
    mha = _mha().eval()
    before = {k: v.clone() for k, v in mha.state_dict().items()}
    gqa = mha_to_gqa(mha, 2)
    assert not gqa.training and gqa.q_proj.weight.dtype == torch.float64
    for k, v in mha.state_dict().items():
        assert_close(v, before[k], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [3, 0, 8, 2.0])
def test_bad_num_kv_heads_raises(bad):
    with pytest.raises(ValueError, match="num_kv_heads"):
        mha_to_gqa(_mha(), bad)


def test_torch_module_is_rejected_with_a_hint():
    with pytest.raises(ValueError, match="from_torch"):
        mha_to_gqa(torch.nn.MultiheadAttention(16, 4), 2)


# ---- mean_pool_heads -------------------------------------------------------------------------
def test_mean_pool_heads_on_a_bias_and_a_weight():
    H, G, D = 6, 2, 3
    w = torch.arange(H * D * 2, dtype=torch.float64).reshape(H * D, 2)
    pooled = mean_pool_heads(w, H, G)
    for g in range(G):  # group g is heads 3g, 3g+1, 3g+2
        want = (
            w[3 * g * D : (3 * g + 1) * D]
            + w[(3 * g + 1) * D : (3 * g + 2) * D]
            + w[(3 * g + 2) * D : (3 * g + 3) * D]
        ) / 3
        assert_close(pooled[g * D : (g + 1) * D], want)
    assert_close(mean_pool_heads(w[:, 0], H, G), pooled[:, 0])  # a bias (H*D,) pools the same way


@pytest.mark.parametrize(
    "shape,H,G,arg", [((12, 4), 5, 1, "weight"), ((12, 4), 4, 3, "num_kv_heads")]
)
def test_mean_pool_heads_rejects_bad_input(shape, H, G, arg):
    with pytest.raises(ValueError, match=arg):
        mean_pool_heads(torch.zeros(shape), H, G)


# ---- the one "G divides H" check ---------------------------------------------------------------
def _bad_groups():
    from mha_course import GPTConfig, scaled_dot_product_attention
    from mha_course.benchmark.flops import projection_flops

    q, k = torch.zeros(1, 4, 2, 8), torch.zeros(1, 3, 2, 8)
    return {
        "MultiHeadAttention": lambda: MultiHeadAttention(16, 4, num_kv_heads=3),
        "kv_group_of_query_heads": lambda: kv_group_of_query_heads(8, 3),
        "mean_pool_heads": lambda: mean_pool_heads(torch.zeros(16, 2), 4, 3),
        "mha_to_gqa": lambda: mha_to_gqa(_mha(), 3),
        "sdpa enable_gqa": lambda: scaled_dot_product_attention(q, k, k, enable_gqa=True),
        "GPTConfig": lambda: GPTConfig(n_head=4, n_kv_head=3, n_embd=16),
        "projection_flops": lambda: projection_flops(1, 2, 2, 16, 4, 3),
    }


@pytest.mark.parametrize("where", list(_bad_groups()))
def test_every_g_divides_h_check_is_the_one_in_checks(where):
    """Each place that needs G | H calls _checks.check_kv_heads, so all say it the same way."""
    with pytest.raises(
        ValueError,
        match=r"G must be a positive divisor of .*each key/value head "
        r"serves H / G query heads",
    ):
        _bad_groups()[where]()

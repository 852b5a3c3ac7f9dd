"""Chapter 15: multi-head latent attention — the explicit form against a dense reference written
out with mha_course.scaled_dot_product_attention, the absorbed form equal to the explicit one
(full forward and decoding with the latent cache), and cache bytes measured == kv_cache_bytes."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import TOL64
from torch.testing import assert_close

from mha_course import (
    KVCache,
    LatentKVCache,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    apply_rope,
    causal_mask,
    kv_cache_bytes,
    scaled_dot_product_attention,
)

B, T, E, H = 2, 9, 32, 4
CONFIGS = {
    "full-rank-q": dict(latent_dim=8, rope_dim=4, q_latent_dim=None),
    "low-rank-q": dict(latent_dim=8, rope_dim=4, q_latent_dim=12),
    "no-rope": dict(latent_dim=6, rope_dim=0, q_latent_dim=None),
    "wide-heads": dict(latent_dim=10, rope_dim=2, q_latent_dim=5, head_dim=16),
}


def make(cfg, seed=0):
    torch.manual_seed(seed)
    m = MultiHeadLatentAttention(E, H, **CONFIGS[cfg], dtype=torch.float64)
    for p in m.parameters():  # larger weights so scores are not all ~0
        torch.nn.init.normal_(p, std=0.3)
    return m


def reference(m, x):
    """MLA written out from the paper's equations, one head at a time."""
    B_, T_, _ = x.shape
    pos = torch.arange(T_)
    c = x @ m.kv_down.weight.T  # (B, T, C)
    cq = x if m.q_down is None else x @ m.q_down.weight.T
    D, R = m.head_dim, m.rope_dim
    heads = []
    for h in range(m.num_heads):
        rows = slice(h * D, (h + 1) * D)
        q = cq @ m.q_up.weight[rows].T  # (B, T, D)
        k = c @ m.k_up.weight[rows].T
        v = c @ m.v_up.weight[rows].T
        if R:
            qr = apply_rope((cq @ m.q_rope.weight[h * R : (h + 1) * R].T)[:, None], pos)[:, 0]
            kr = apply_rope((x @ m.k_rope.weight.T)[:, None], pos)[:, 0]
            q, k = torch.cat([q, qr], -1), torch.cat([k, kr], -1)
        heads.append(
            scaled_dot_product_attention(
                q, k, v, attn_mask=causal_mask(T_), scale=1 / math.sqrt(D + R)
            )
        )
    return torch.cat(heads, -1) @ m.out_proj.weight.T  # (B, T, H*D) -> (B, T, E)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_explicit_equals_reference(cfg):
    m = make(cfg)
    x = torch.randn(B, T, E, dtype=torch.float64)
    assert_close(m(x), reference(m, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_absorbed_equals_explicit(cfg):
    m = make(cfg)
    x = torch.randn(B, T, E, dtype=torch.float64)
    assert_close(m(x, absorbed=True), m(x), **TOL64)


@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_decode_with_latent_cache_equals_full_forward(cfg, absorbed):
    m = make(cfg)
    x = torch.randn(B, T, E, dtype=torch.float64)
    full = m(x)
    cache = LatentKVCache()
    w = m.absorbed_weights()
    outs = [m(x[:, :4], kv_cache=cache, absorbed=absorbed, weights=w)]
    outs += [m(x[:, t : t + 1], kv_cache=cache, absorbed=absorbed, weights=w) for t in range(4, T)]
    assert_close(torch.cat(outs, 1), full, **TOL64)
    assert cache.latent.shape == (B, T, m.latent_dim) and cache.rope_key.shape == (B, T, m.rope_dim)


def test_absorbed_weights_are_the_products():
    m = make("low-rank-q")
    w_q, w_ov = m.absorbed_weights()
    D, C = m.head_dim, m.latent_dim
    h = 2
    assert_close(w_q[h], m.k_up.weight[h * D : (h + 1) * D].T @ m.q_up.weight[h * D : (h + 1) * D])
    assert_close(
        w_ov[:, h], m.out_proj.weight[:, h * D : (h + 1) * D] @ m.v_up.weight[h * D : (h + 1) * D]
    )
    assert w_q.shape == (m.num_heads, C, 12) and w_ov.shape == (E, m.num_heads, C)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cache_bytes_measured_equal_the_one_formula(dtype):
    m = MultiHeadLatentAttention(E, H, latent_dim=8, rope_dim=4, dtype=dtype)
    cache = LatentKVCache()
    m(torch.randn(B, 5, E, dtype=dtype), kv_cache=cache)
    assert cache.nbytes == kv_cache_bytes(1, None, None, 5, B, dtype, latent_dim=8, rope_dim=4)
    for G in (H, 2, 1):  # and the same formula for MHA / GQA / MQA's KVCache
        kv = KVCache()
        MultiHeadAttention(E, H, num_kv_heads=G, dtype=dtype)(
            torch.randn(B, 5, E, dtype=dtype), kv_cache=kv
        )
        assert kv.nbytes == kv_cache_bytes(1, G, E // H, 5, B, dtype)


def test_deepseek_v2_shape_bytes():
    """DeepSeek-V2: 60 layers, C = 512, R = 64 -> 576 elements per token per layer (paper, Table 1:
    (d_c + d_R) l = 4.5 d_h l with d_h = 128)."""
    assert kv_cache_bytes(60, None, None, latent_dim=512, rope_dim=64) == 60 * 576 * 2
    assert 512 + 64 == 4.5 * 128


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(latent_dim=0), "latent_dim"),
        (dict(rope_dim=3), "rope_dim"),
        (dict(q_latent_dim=-2), "q_latent_dim"),
    ],
)
def test_bad_config_raises(kw, name):
    args = dict(latent_dim=8, rope_dim=4) | kw
    with pytest.raises(ValueError, match=name):
        MultiHeadLatentAttention(E, H, **args)


def test_bad_input_raises():
    m = MultiHeadLatentAttention(E, H, latent_dim=8)
    with pytest.raises(ValueError, match=r"\(B, L, E\)"):
        m(torch.randn(2, 3, E + 1))
    with pytest.raises(ValueError, match="latent_dim"):
        kv_cache_bytes(1, None, None, latent_dim=0)

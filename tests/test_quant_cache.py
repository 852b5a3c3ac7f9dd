"""Chapter 16: int8 / 4-bit KV quantization with scales — round trip error bounded by half a step
per group, the scales' axes, packing, a quantized cache inside MultiHeadAttention close to the float
cache, and its bytes measured == the formula."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from mha_course import (
    KVCache,
    MultiHeadAttention,
    QuantizedKVCache,
    dequantize,
    kv_cache_bytes,
    quantize,
    quantized_cache_bytes,
)
from mha_course.caches.quantized import pack_int4, unpack_int4


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("axis, scale_shape", [("token", (2, 3, 7, 1)), ("channel", (2, 3, 1, 8))])
def test_round_trip_error_is_at_most_half_a_step(axis, scale_shape, bits):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    q, s = quantize(x, axis, bits)
    assert q.dtype == torch.int8 and s.shape == scale_shape
    assert q.abs().max() <= 2 ** (bits - 1) - 1
    err = (dequantize(q, s) - x).abs()
    assert (err <= s / 2 + 1e-12).all()
    # the group's largest value is exact (absmax maps to +-q_max)
    dim = -1 if axis == "token" else -2
    amax_idx = x.abs().argmax(dim=dim, keepdim=True)
    assert_close(dequantize(q, s).gather(dim, amax_idx), x.gather(dim, amax_idx))


def test_per_channel_wins_on_outlier_channels():
    """Keys with a few large channels (what LLM keys look like): per-channel scales keep the
    small channels precise, per-token ones spend the range on the outliers."""
    torch.manual_seed(1)
    k = torch.randn(1, 2, 64, 16, dtype=torch.float64)
    k[..., [3, 11]] *= 30
    small = [c for c in range(16) if c not in (3, 11)]
    err = {
        a: ((dequantize(*quantize(k, a)) - k)[..., small].norm() / k[..., small].norm()).item()
        for a in ("token", "channel")
    }
    assert err["channel"] < err["token"] / 5


def test_bad_axis_and_bits_raise():
    x = torch.randn(1, 1, 2, 4)
    with pytest.raises(ValueError, match="axis"):
        quantize(x, "head")
    with pytest.raises(ValueError, match="bits"):
        quantize(x, bits=3)
    with pytest.raises(ValueError, match=r"\(B, G, S, D\)"):
        quantize(torch.randn(2, 4))


def test_int4_packing_round_trips():
    q = torch.randint(-8, 8, (3, 5, 10), dtype=torch.int8)
    p = pack_int4(q)
    assert p.dtype == torch.uint8 and p.shape == (3, 5, 5)
    assert torch.equal(unpack_int4(p), q)
    with pytest.raises(ValueError, match="D even"):
        pack_int4(q[..., :3])


@pytest.mark.parametrize("bits, tol", [(8, 0.02), (4, 0.3)])
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_quantized_cache_decodes_close_to_float(G, bits, tol):
    torch.manual_seed(2)
    E, H, T = 32, 4, 10
    m = MultiHeadAttention(E, H, num_kv_heads=G, dtype=torch.float64).eval()
    x = torch.randn(2, T, E, dtype=torch.float64)
    ref, qc, fc = [], QuantizedKVCache(bits), KVCache()
    out = [m(x[:, t : t + 1], kv_cache=qc, is_causal=True)[0] for t in range(T)]
    ref = [m(x[:, t : t + 1], kv_cache=fc, is_causal=True)[0] for t in range(T)]
    out, ref = torch.cat(out, 1), torch.cat(ref, 1)
    rel = ((out - ref).norm() / ref.norm()).item()
    assert 0 < rel < tol
    G_ = H if G is None else G
    assert qc.nbytes == quantized_cache_bytes(1, G_, E // H, T, 2, bits)
    assert qc.nbytes < fc.nbytes
    assert fc.nbytes == kv_cache_bytes(1, G_, E // H, T, 2, torch.float64)


def test_bytes_formula_int8_vs_bf16():
    # Llama-2-7B-like: 32 layers, 32 kv heads, D = 128; int8 + fp16 scales vs bf16
    bf16 = kv_cache_bytes(32, 32, 128)
    int8 = quantized_cache_bytes(32, 32, 128)
    assert bf16 == 2 * 32 * 32 * 128 * 2
    assert int8 == 2 * 32 * 32 * 128 + 2 * 32 * 32 * 2


@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [8, 4])
def test_the_cache_quantizes_with_the_scale_it_stores(bits, scale_dtype):
    """Codes computed with the exact scale but decoded with the rounded, stored one were off by up to
    1.066 x half a step (fp16); each decoded value must be within half a step of the STORED scale."""
    torch.manual_seed(0)
    k = (
        torch.randn(2, 3, 64, 8, dtype=torch.float64)
        * torch.logspace(-3, 3, 64, dtype=torch.float64)[:, None]
    )
    cache = QuantizedKVCache(bits, scale_dtype=scale_dtype)
    k_hat, _ = cache.update(k, k)
    s = cache.key_scale.double()  # (B, G, S, 1), what the cache holds
    assert cache.key_scale.dtype == scale_dtype
    assert ((k_hat - k).abs() <= s / 2 * (1 + 1e-12)).all()
    q = cache.q_key if bits == 8 else unpack_int4(cache.q_key)
    assert torch.equal(
        q.double(), torch.round(k / s).clamp(-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1)
    )


@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [8, 4])
def test_a_scale_rounded_down_does_not_clamp_the_largest_value(bits, scale_dtype):
    """Where scale_dtype is subnormal (fp16 below 6.1e-5) max|x| / q_max can round DOWN by up to half:
    the largest value then clamped at q_max, off by up to 74 x half a stored step. Each decoded value
    must stay within half a step of the stored scale across the subnormal range too."""
    torch.manual_seed(0)
    k = (
        torch.randn(1, 2, 64, 8, dtype=torch.float64)
        * torch.logspace(-7, -2, 64, dtype=torch.float64)[:, None]
    )
    cache = QuantizedKVCache(bits, scale_dtype=scale_dtype)
    k_hat, _ = cache.update(k, k)
    s = cache.key_scale.double()
    assert ((k_hat - k).abs() <= s / 2 * (1 + 1e-12)).all()
    q_max = 2 ** (bits - 1) - 1
    assert (k.abs().amax(-1, keepdim=True) <= q_max * s).all()  # the stored scale covers the token


def test_tiny_keys_do_not_decode_to_zero():
    """max|x| / 127 below fp16's smallest subnormal rounded the stored scale to 0: every value decoded to 0."""
    k = torch.full((1, 1, 1, 4), 1e-6, dtype=torch.float64) * torch.tensor(
        [1.0, -0.5, 0.25, 0.0], dtype=torch.float64
    )
    k_hat, _ = QuantizedKVCache().update(k, k)
    assert (k_hat[..., :3] != 0).all() and k_hat[..., 3] == 0
    assert_close(
        k_hat,
        k,
        rtol=0,
        atol=torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps / 2,
    )


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("G", [4, 2, 1])
def test_attend_equals_attention_over_the_dequantized_cache(G, bits):
    """The fast decode path (codes turned to floats one head at a time, scales on the scores and
    weights) == SDPA over what update() hands back, for a prompt chunk (causal) then single steps."""
    from mha_course import scaled_dot_product_attention
    from mha_course.ops.masks import causal_mask

    torch.manual_seed(1)
    B, H, D = 2, 4, 8
    cache = QuantizedKVCache(bits)
    for L in (5, 1, 1, 3):
        k, v = (
            torch.randn(B, G, L, D, dtype=torch.float64),
            torch.randn(B, G, L, D, dtype=torch.float64),
        )
        q = torch.randn(B, H, L, D, dtype=torch.float64)
        k_all, v_all = cache.update(k, v)
        S = k_all.shape[2]
        want = scaled_dot_product_attention(
            q, k_all, v_all, attn_mask=causal_mask(L, S, offset=S - L), enable_gqa=G != H
        )
        assert_close(cache.attend(q), want, rtol=1e-12, atol=1e-12)

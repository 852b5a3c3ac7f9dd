"""Chapter 8: the work formulas against real counts (torch's FLOP counter, tensor sizes, KVCache)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mha_course import KVCache, MultiHeadAttention, scaled_dot_product_attention
from mha_course.benchmark import (
    arithmetic_intensity,
    attention_flops,
    decode_step_bytes,
    io_bytes,
    kv_bytes_per_token,
    lookup_peak,
    percent_of_peak,
    projection_flops,
    scores_bytes,
)
from mha_course.benchmark.decode import kv_head_choices


def counted_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("B,H,L,S,D", [(1, 1, 3, 5, 4), (2, 3, 7, 7, 8), (2, 4, 1, 9, 16)])
def test_attention_flops_match_torch_flop_counter(B, H, L, S, D):
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    measured = counted_flops(lambda: scaled_dot_product_attention(q, k, v))
    assert attention_flops(B, H, L, S, D) == measured


def test_causal_halves_the_flops():
    full, causal = attention_flops(2, 4, 64, 64, 16), attention_flops(2, 4, 64, 64, 16, causal=True)
    assert 2 * causal == full


@pytest.mark.parametrize("H,G", [(4, 4), (4, 2), (4, 1)])
def test_projection_flops_match_torch_flop_counter(H, G):
    B, L, E = 2, 5, 16
    m = MultiHeadAttention(E, H, num_kv_heads=G)
    x = torch.randn(B, L, E)
    attention_only = attention_flops(B, H, L, L, E // H)
    with torch.no_grad():
        measured = counted_flops(lambda: m(x))
    # the module's SDPA is counted too (as a fused op) — remove it to isolate the projections
    with torch.no_grad():
        q = torch.randn(B, H, L, E // H)
        kv = torch.randn(B, G, L, E // H)
        sdpa = counted_flops(lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=G != H))
    assert projection_flops(B, L, L, E, H, G) == measured - sdpa
    assert sdpa in (attention_only, 0)


def test_io_and_scores_bytes_are_tensor_sizes():
    B, H, G, L, S, D = 2, 4, 2, 5, 7, 8
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
    out, weights = scaled_dot_product_attention(q, k, v, enable_gqa=True, return_weights=True)
    sizes = sum(t.numel() * t.element_size() for t in (q, k, v, out))
    assert io_bytes(B, H, L, S, D, G=G, element_size=4) == sizes
    assert scores_bytes(B, H, L, S, element_size=4) == weights.numel() * weights.element_size()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_bytes_per_token_matches_the_kv_cache(dtype):
    B, G, S, D = 1, 3, 11, 8
    cache = KVCache()
    cache.update(torch.zeros(B, G, S, D, dtype=dtype), torch.zeros(B, G, S, D, dtype=dtype))
    elem = torch.empty((), dtype=dtype).element_size()
    assert kv_bytes_per_token(G, D, elem) * S == cache.nbytes
    assert decode_step_bytes(B, 6, G, S, D, elem) == cache.nbytes + 2 * B * 6 * D * elem


def test_arithmetic_intensity_and_bad_input():
    assert arithmetic_intensity(attention_flops(1, 1, 8, 8, 4), 64) == pytest.approx(
        4 * 8 * 8 * 4 / 64
    )
    with pytest.raises(ValueError, match="nbytes"):
        arithmetic_intensity(10, 0)
    with pytest.raises(ValueError, match="L: expected a positive integer"):
        attention_flops(1, 1, 0, 8, 4)
    with pytest.raises(ValueError, match="E, H, G"):
        projection_flops(1, 4, 4, 10, 4)


def test_decode_intensity_is_about_2h_over_g_flops_per_number():
    H, G, S, D = 32, 8, 4096, 128
    elements = decode_step_bytes(1, H, G, S, D, element_size=1)
    assert arithmetic_intensity(attention_flops(1, H, 1, S, D), elements) == pytest.approx(
        2 * H / G, rel=0.01
    )


def test_peak_table_lookup():
    peak, bw = lookup_peak("NVIDIA H100 80GB HBM3", torch.bfloat16)
    assert peak is not None and bw is not None and peak > bw
    assert lookup_peak("NVIDIA H100 PCIe", "bfloat16")[0] < peak  # the more specific entry wins
    assert lookup_peak("Some Future GPU", "bfloat16") == (None, None)
    assert lookup_peak("Tesla T4", "bfloat16")[0] is None  # no bf16 tensor cores
    assert percent_of_peak(peak, 1.0, "NVIDIA H100 80GB HBM3", "bfloat16") == pytest.approx(100.0)
    assert percent_of_peak(1e12, 1.0, "cpu", "float32") is None


def test_kv_head_choices():
    assert kv_head_choices(12) == {"MHA": 12, "GQA (G=3)": 3, "MQA": 1}
    assert kv_head_choices(2) == {"MHA": 2, "MQA": 1}
    assert all(12 % g == 0 for g in kv_head_choices(12).values())

"""attention_by_head (mha_course.caches.per_head): the B·G (sequence, key/value head) pairs are
read a slice at a time, one load call per slice (all pairs in one off the CPU), and every slicing
gives the same numbers as dense attention (float64)."""

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention
from torch.testing import assert_close

from mha_course import BlockPool, PagedKVCache, QuantizedKVCache, paged_attention
from mha_course.caches import per_head
from mha_course.caches.per_head import attention_by_head, pairs_per_slice

f64 = torch.float64


def test_pairs_per_slice_fills_the_byte_budget_on_a_cpu_and_takes_all_elsewhere():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")  # a device object: no GPU needed
    assert pairs_per_slice(64, per_head.SLICE_BYTES // 4, cpu) == 4
    assert pairs_per_slice(64, per_head.SLICE_BYTES * 3, cpu) == 1  # at least one
    assert pairs_per_slice(3, 1, cpu) == 3  # never more than there are
    assert pairs_per_slice(64, per_head.SLICE_BYTES * 3, gpu) == 64


@pytest.mark.parametrize("slice_pairs", [None, 1, 3, 4])
def test_one_load_per_slice_of_pairs_and_padding_masked(slice_pairs):
    """B = 2 sequences of 5 and 9 tokens (the first padded to 9 with junk), G = 2, H = 4, L = 2:
    ceil(B·G / slice) load calls, each for consecutive pairs, and dense attention's numbers."""
    torch.manual_seed(0)
    B, G, H, L, D, lengths = 2, 2, 4, 2, 8, [5, 9]
    k, v = torch.randn(B, G, 9, D, dtype=f64), torch.randn(B, G, 9, D, dtype=f64)
    q = torch.randn(B, H, L, D, dtype=f64)
    calls = []

    def load(i, j):
        calls.append((i, j))
        return k.reshape(B * G, 9, D)[i:j], v.reshape(B * G, 9, D)[i:j]  # (B, G) -> (B·G)

    got = attention_by_head(q, load, num_kv_heads=G, lengths=lengths, slice_pairs=slice_pairs)
    step = slice_pairs or B * G
    assert calls == [(i, min(i + step, B * G)) for i in range(0, B * G, step)]
    for b, S in enumerate(lengths):
        mask = torch.arange(S)[None, :] <= torch.arange(S - L, S)[:, None]  # (L, S) causal
        want = scaled_dot_product_attention(
            q[b : b + 1], k[b : b + 1, :, :S], v[b : b + 1, :, :S], attn_mask=mask, enable_gqa=True
        )
        assert_close(got[b : b + 1], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("budget", [1, 3000, 2**30], ids=["a pair", "a few pairs", "all pairs"])
def test_int8_and_paged_reads_equal_dense_attention_at_any_slice(monkeypatch, budget):
    monkeypatch.setattr(per_head, "SLICE_BYTES", budget)
    torch.manual_seed(1)
    B, G, H, D, bs, lengths = 3, 2, 4, 8, 4, [6, 13, 9]
    cache = PagedKVCache(BlockPool(64, bs, G, D, dtype=f64))
    dense = [(torch.randn(G, n, D, dtype=f64), torch.randn(G, n, D, dtype=f64)) for n in lengths]
    for s, n in enumerate(lengths):
        cache.add(s, n)
    for p in range(0, max(lengths), bs):  # a block each in turn: no table is a run
        for s, n in enumerate(lengths):
            if p < n:
                cache.append(s, dense[s][0][:, p : p + bs], dense[s][1][:, p : p + bs])
    q = torch.randn(B, H, 1, D, dtype=f64)
    got = paged_attention(q, cache, [0, 1, 2], path="gather")
    for s, (k, v) in enumerate(dense):
        want = scaled_dot_product_attention(q[s : s + 1], k[None], v[None], enable_gqa=True)
        assert_close(got[s : s + 1], want, rtol=1e-12, atol=1e-12)
    int8 = QuantizedKVCache(8)
    k_hat, v_hat = int8.update(
        torch.randn(B, G, 7, D, dtype=f64), torch.randn(B, G, 7, D, dtype=f64)
    )
    want = scaled_dot_product_attention(q, k_hat, v_hat, enable_gqa=True)
    assert_close(int8.attend(q), want, rtol=1e-12, atol=1e-12)

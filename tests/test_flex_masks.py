"""Chapter 18: FlexAttention mask_mod / score_mod functions against the course's eager SDPA with
the equivalent explicit mask, built independently (tril, triu, block_diag), on CPU."""

import functools

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask as _create_block_mask

from mha_course import scaled_dot_product_attention
from mha_course.ops.flex_masks import (
    alibi,
    block_counts,
    causal,
    document_causal,
    flex_attention,
    prefix_lm,
    sliding_window,
)

B, H, T, D = 2, 4, 96, 8
TRIL = torch.ones(T, T).tril().bool()
DOC_LENGTHS = [30, 10, 56]
DOC_IDS = torch.repeat_interleave(torch.arange(3), torch.tensor(DOC_LENGTHS))
SLOPES = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)  # ALiBi, H a power of 2
DIST = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs()


@functools.cache
def create_block_mask(mask_mod, B_, H_, L, S, device, BLOCK_SIZE):
    """torch's create_block_mask, built once per mask (it traces the function: slow-ish)."""
    return _create_block_mask(mask_mod, B_, H_, L, S, device=device, BLOCK_SIZE=BLOCK_SIZE)


def _qkv(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g, dtype=dtype) for _ in range(3))


CASES = {  # name: (mask_mod, explicit bool mask (T, T) True = may attend)
    "causal": (causal, TRIL),
    "sliding_window_16": (sliding_window(16), TRIL & torch.ones(T, T).triu(-15).bool()),
    "prefix_lm_40": (prefix_lm(40), TRIL | (torch.arange(T) < 40)[None, :]),
    "documents": (
        document_causal(DOC_IDS),
        torch.block_diag(*(torch.ones(n, n).tril() for n in DOC_LENGTHS)).bool(),
    ),
}
TOL = {torch.float64: dict(atol=1e-12, rtol=1e-12), torch.float32: dict(atol=2e-6, rtol=2e-6)}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_mask_mod_equals_explicit_mask(name, dtype):
    mask_mod, dense = CASES[name]
    q, k, v = _qkv(dtype)
    block_mask = create_block_mask(mask_mod, None, None, T, T, device="cpu", BLOCK_SIZE=32)
    got = flex_attention(q, k, v, block_mask=block_mask)
    torch.testing.assert_close(
        got, scaled_dot_product_attention(q, k, v, attn_mask=dense), **TOL[dtype]
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_alibi_score_mod_equals_additive_bias(dtype):
    q, k, v = _qkv(dtype, seed=1)
    bias = -SLOPES[:, None, None] * DIST  # (H, 1, 1) * (T, T) -> (H, T, T)
    block_mask = create_block_mask(causal, None, None, T, T, device="cpu", BLOCK_SIZE=32)
    got = flex_attention(q, k, v, score_mod=alibi(SLOPES.to(dtype)), block_mask=block_mask)
    ref = scaled_dot_product_attention(
        q, k, v, attn_mask=bias.to(dtype).masked_fill(~TRIL, -torch.inf)
    )
    torch.testing.assert_close(got, ref, **TOL[dtype])


def test_block_counts():
    # 96 positions in blocks of 32: a 3 x 3 grid per (batch, head).
    bm = create_block_mask(causal, None, None, T, T, device="cpu", BLOCK_SIZE=32)
    assert block_counts(bm) == {"partial": 3, "full": 3, "skipped": 3, "total": 9}
    bm = create_block_mask(sliding_window(16), None, None, T, T, device="cpu", BLOCK_SIZE=32)
    assert block_counts(bm) == {"partial": 5, "full": 0, "skipped": 4, "total": 9}
    bm = create_block_mask(document_causal(DOC_IDS), None, None, T, T, device="cpu", BLOCK_SIZE=32)
    # Blocks 0-31 (doc 0, start of doc 1), 32-63 (end of doc 1, doc 2), 64-95 (doc 2): the
    # diagonal, doc 1 across blocks (1, 0) and doc 2 across (2, 1); doc 2 never sees block 0.
    assert block_counts(bm) == {"partial": 5, "full": 0, "skipped": 4, "total": 9}
    bm = create_block_mask(prefix_lm(40), None, None, T, T, device="cpu", BLOCK_SIZE=32)
    # The prefix 0-39 makes blocks (0, 0), (1, 0), (2, 0), (2, 1) full; only (0, 2), (1, 2) skip.
    assert block_counts(bm) == {"partial": 3, "full": 4, "skipped": 2, "total": 9}
    bm = create_block_mask(prefix_lm(40), 2, 4, T, T, device="cpu", BLOCK_SIZE=32)  # per (b, h)
    assert block_counts(bm)["total"] == 2 * 4 * 9


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="window"):
        sliding_window(0)
    with pytest.raises(ValueError, match="prefix_len"):
        prefix_lm(-1)
    with pytest.raises(ValueError, match="doc_ids"):
        document_causal(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="slopes"):
        alibi(torch.zeros(2, 2))

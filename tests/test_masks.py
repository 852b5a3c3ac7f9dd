"""Mask helpers: causal (with a KV-cache offset), padding, additive, combined — each checked by
what it does inside torch's SDPA, the convention it must follow."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TOL64
from torch.testing import assert_close

from mha_course import causal_mask, combine_masks, padding_mask, to_additive
from mha_course.ops.masks import key_padding_to_attn_mask


def qkv(L, S, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, L, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 3, S, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 3, S, 5, generator=g, dtype=torch.float64),
    )


@pytest.mark.parametrize("L,S", [(4, 4), (3, 6), (6, 3)])
def test_causal_mask_is_torchs_is_causal(L, S):
    q, k, v = qkv(L, S)
    mask = causal_mask(L, S)
    assert mask.dtype == torch.bool and mask.shape == (L, S)
    assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        **TOL64,
    )


def test_causal_mask_rows_and_offset():
    m = causal_mask(4)
    for i in range(4):  # query i sees keys 0..i and nothing after
        assert m[i, : i + 1].all() and not m[i, i + 1 :].any()
    # With 3 cached keys, 2 new queries are the last 2 rows of the full 5 x 5 causal mask.
    assert causal_mask(2, offset=3).shape == (2, 5)
    assert torch.equal(causal_mask(2, offset=3), causal_mask(5)[3:])


def test_padding_mask():
    assert torch.equal(
        padding_mask([2, 4]),
        torch.tensor([[False, False, True, True], [False, False, False, False]]),
    )
    assert padding_mask(torch.tensor([1, 3]), S=5).shape == (2, 5)
    assert padding_mask([1, 3], S=5)[1].tolist() == [False, False, False, True, True]


def test_to_additive_acts_like_the_bool_mask():
    q, k, v = qkv(4, 6)
    allowed = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) > 0.5
    allowed[:, 0] = True
    additive = to_additive(allowed, torch.float64)
    assert additive.dtype == torch.float64
    assert bool((additive[allowed] == 0).all()) and bool(torch.isinf(additive[~allowed]).all())
    assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
        **TOL64,
    )
    bias = torch.randn(4, 6)
    assert torch.equal(to_additive(bias, torch.float64), bias.double())  # float masks pass through


def test_combine_masks():
    g = torch.Generator().manual_seed(2)
    a, b = torch.rand(4, 6, generator=g) > 0.3, torch.rand(2, 1, 1, 6, generator=g) > 0.3
    assert combine_masks() is None and combine_masks(None, None) is None
    assert combine_masks(a) is a
    both = combine_masks(a, None, b)
    assert both.dtype == torch.bool and torch.equal(both, a & b)  # bool AND, broadcast
    bias = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mixed = combine_masks(a, bias, dtype=torch.float64)  # any float -> everything additive, summed
    assert mixed.dtype == torch.float64
    assert_close(mixed, bias.masked_fill(~a, float("-inf")), **TOL64)
    q, k, v = qkv(4, 6)
    a[:, 0] = b[..., 0] = True
    assert_close(
        F.scaled_dot_product_attention(
            q, k, v, attn_mask=combine_masks(a, b, bias, dtype=torch.float64)
        ),
        F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.masked_fill(~(a & b), float("-inf"))
        ),
        **TOL64,
    )


def test_key_padding_to_attn_mask_flips_the_convention():
    kpm = padding_mask([2, 3])  # (B, S), True = padding
    m = key_padding_to_attn_mask(kpm, 2, 3)
    assert m.shape == (2, 1, 1, 3)  # broadcasts over heads and queries
    assert torch.equal(m[:, 0, 0], ~kpm)  # True = may attend
    additive = torch.zeros(2, 3).masked_fill(kpm, float("-inf"))
    assert torch.equal(key_padding_to_attn_mask(additive, 2, 3)[:, 0, 0], additive)  # kept as is


def test_torch_mha_mask_to_sdpa_matches_nn_multiheadattention():
    """A bool mask in nn.MultiheadAttention's convention (True = blocked), converted, gives our
    module the same output as torch's module with the original mask; a float mask passes as is."""
    from mha_course import MultiHeadAttention, torch_mha_mask_to_sdpa

    torch.manual_seed(0)
    torch_mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(torch_mha, impl="eager")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    blocked = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # torch: True = blocked
    expected, _ = torch_mha(x, x, x, attn_mask=blocked)
    allowed = torch_mha_mask_to_sdpa(blocked)
    assert_close(allowed, causal_mask(5, 5))
    assert_close(ours(x, attn_mask=allowed)[0], expected, **TOL64)
    additive = torch.randn(5, 5, dtype=torch.float64)
    assert torch_mha_mask_to_sdpa(additive) is additive
    assert_close(ours(x, attn_mask=additive)[0], torch_mha(x, x, x, attn_mask=additive)[0], **TOL64)


def test_torch_mha_mask_to_sdpa_rejects_integer_masks():
    from mha_course import torch_mha_mask_to_sdpa

    with pytest.raises(ValueError, match="mask"):
        torch_mha_mask_to_sdpa(torch.ones(3, 3, dtype=torch.int64))

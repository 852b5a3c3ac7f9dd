"""Chapter 17: the tiled FlashAttention backward against gradcheck and autograd (float64)."""

import pytest
import torch

from mha_course import scaled_dot_product_attention
from mha_course.kernels.flash_backward import (
    backward_d_term,
    flash_attention,
    flash_attention_backward,
)
from mha_course.kernels.tiled import tiled_attention


def _qkv(*lead, L=13, S=13, D=4, Dv=None, dtype=torch.float64, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    Dv = D if Dv is None else Dv
    ts = (
        torch.randn(*lead, L, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, Dv, generator=g, dtype=dtype),
    )
    return tuple(t.requires_grad_(grad) for t in ts)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S,block_q,block_k", [(7, 7, 3, 2), (5, 9, 2, 4), (9, 4, 4, 3)])
def test_gradcheck(is_causal, L, S, block_q, block_k):
    q, k, v = _qkv(2, L=L, S=S, D=3, Dv=2)
    fn = lambda q, k, v: flash_attention(q, k, v, is_causal, None, block_q, block_k)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_q,block_k", [(1, 1), (4, 5), (16, 8), (64, 64)])
def test_matches_autograd_through_dense(is_causal, block_q, block_k):
    q, k, v = _qkv(2, 3, L=21, S=21, D=8)
    d_out = torch.randn(
        2, 3, 21, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    ref = scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_out)
    out = flash_attention(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, ref)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), d_out), ref_grads):
        torch.testing.assert_close(got, want)


def test_cross_lengths_and_scale():
    q, k, v = _qkv(3, L=6, S=17, D=5, Dv=7)
    d_out = torch.randn(3, 6, 7, dtype=torch.float64)
    for is_causal in (False, True):
        ref = scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.7)
        ref_grads = torch.autograd.grad(ref, (q, k, v), d_out)
        out = flash_attention(q, k, v, is_causal=is_causal, scale=0.7, block_q=4, block_k=3)
        for got, want in zip(torch.autograd.grad(out, (q, k, v), d_out), ref_grads):
            torch.testing.assert_close(got, want)


def test_d_term_is_rowsum_of_p_times_dp():
    """D = rowsum(dO ∘ O) equals the softmax backward's rowsum(P ∘ dP), dP = dO Vᵀ."""
    q, k, v = _qkv(2, L=9, S=11, D=4, grad=False)
    out, weights = scaled_dot_product_attention(q, k, v, return_weights=True)
    d_out = torch.randn_like(out)
    dp = d_out @ v.transpose(-2, -1)
    torch.testing.assert_close(backward_d_term(out, d_out), (weights * dp).sum(-1))


def test_backward_from_saved_tensors_only():
    """The function form needs only Q, K, V, O, lse and dO — no saved weights."""
    q, k, v = _qkv(2, L=10, S=10, D=4, grad=False)
    out, lse = tiled_attention(q, k, v, is_causal=True, return_lse=True)
    d_out = torch.randn_like(out)
    grads = flash_attention_backward(q, k, v, out, lse, d_out, is_causal=True, block_q=3, block_k=4)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(
        scaled_dot_product_attention(qq, kk, vv, is_causal=True), (qq, kk, vv), d_out
    )
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want)


def test_bad_tile_size_names_argument():
    q, k, v = _qkv(1, L=4, S=4, D=2, grad=False)
    with pytest.raises(ValueError, match="block_k"):
        flash_attention(q, k, v, block_k=0)

"""``MultiHeadAttention.from_torch`` against ``torch.nn.MultiheadAttention`` itself.

Self- and cross-attention, kdim/vdim, no bias, packed and separate in-projections, key padding,
``attn_mask`` (torch's bool convention is the OPPOSITE: True = NOT allowed; float masks are
additive in both), ``is_causal``, ``need_weights`` (averaged and per head), dropout, and the
gradients of inputs and parameters; both ``impl="eager"`` and ``impl="sdpa"``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import IMPLS, TOL
from torch import nn
from torch.testing import assert_close

from mha_course import MultiHeadAttention

B, L, S, E, H = 2, 5, 7, 12, 3


def torch_and_ours(
    impl, dtype=torch.float64, bias=True, kdim=None, vdim=None, dropout=0.0, batch_first=True
):
    """A torch module with random weights AND biases (torch initialises biases to 0), and ours."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(
        E, H, dropout=dropout, bias=bias, kdim=kdim, vdim=vdim, batch_first=batch_first, dtype=dtype
    )
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    ref.eval()
    return ref, MultiHeadAttention.from_torch(ref, impl=impl)


def inputs(dtype, kdim=E, vdim=E, S=S):
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(B, L, E, generator=g, dtype=dtype),
        torch.randn(B, S, kdim, generator=g, dtype=dtype),
        torch.randn(B, S, vdim, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_self_attention(impl, dtype):
    ref, ours = torch_and_ours(impl, dtype)
    assert ref._qkv_same_embed_dim  # the packed in_proj_weight path
    x, _, _ = inputs(dtype)
    out, w = ours(x)
    assert w is None
    assert_close(out, ref(x, x, x, need_weights=False)[0], **TOL[dtype])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kdim,vdim", [(E, E), (5, 9), (E, 4)], ids=["E", "kdim,vdim", "vdim"])
def test_cross_attention_kdim_vdim(impl, dtype, kdim, vdim):
    ref, ours = torch_and_ours(impl, dtype, kdim=kdim, vdim=vdim)
    assert ref._qkv_same_embed_dim == (kdim == vdim == E)  # packed and separate weights
    q, k, v = inputs(dtype, kdim, vdim)
    assert_close(ours(q, k, v)[0], ref(q, k, v, need_weights=False)[0], **TOL[dtype])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("separate", [False, True], ids=["packed", "separate"])
def test_no_bias(impl, separate):
    ref, ours = torch_and_ours(impl, bias=False, kdim=6 if separate else None)
    assert ours.q_proj.bias is None and ours.out_proj.bias is None
    q, k, v = inputs(torch.float64, kdim=6 if separate else E)
    assert_close(ours(q, k, v)[0], ref(q, k, v, need_weights=False)[0], **TOL[torch.float64])


def test_batch_first_false_module():
    """Ours is always batch-first; a sequence-first torch module gives the transposed result."""
    ref, ours = torch_and_ours("eager", batch_first=False)
    q, k, v = inputs(torch.float64)
    ref_out = ref(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), need_weights=False)[0]
    assert_close(ours(q, k, v)[0], ref_out.transpose(0, 1), **TOL[torch.float64])


def _padding():
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, 4:] = True  # sequence 0 has 4 real keys
    kpm[1, 6:] = True
    return kpm


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_key_padding_mask(impl, kind):
    ref, ours = torch_and_ours(impl)
    q, k, v = inputs(torch.float64)
    kpm = _padding()  # True = padding in both conventions
    if kind == "float":
        kpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(kpm, float("-inf"))
    expected = ref(q, k, v, key_padding_mask=kpm, need_weights=False)[0]
    assert_close(ours(q, k, v, key_padding_mask=kpm)[0], expected, **TOL[torch.float64])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", ["(L, S)", "(B, H, L, S)"])
def test_bool_attn_mask_opposite_convention(impl, shape):
    ref, ours = torch_and_ours(impl)
    q, k, v = inputs(torch.float64)
    g = torch.Generator().manual_seed(2)
    size = (L, S) if shape == "(L, S)" else (B, H, L, S)
    may_attend = torch.rand(*size, generator=g) > 0.4
    may_attend[..., 0] = True
    torch_mask = ~may_attend  # torch: True = NOT allowed
    if shape != "(L, S)":
        torch_mask = torch_mask.reshape(
            B * H, L, S
        )  # (B, H, L, S) -> (B*H, L, S), torch's 3-D form
    expected = ref(q, k, v, attn_mask=torch_mask, need_weights=False)[0]
    assert_close(ours(q, k, v, attn_mask=may_attend)[0], expected, **TOL[torch.float64])
    # Passing torch's mask unchanged would be a bug — and gives a different answer.
    if shape == "(L, S)":
        assert not torch.allclose(
            ours(q, k, v, attn_mask=~may_attend | (torch.arange(S) == 1))[0], expected
        )


@pytest.mark.parametrize("impl", IMPLS)
def test_float_attn_mask_and_padding_together(impl):
    ref, ours = torch_and_ours(impl)
    q, k, v = inputs(torch.float64)
    bias = torch.randn(L, S, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    kpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(_padding(), float("-inf"))
    expected = ref(q, k, v, attn_mask=bias, key_padding_mask=kpm, need_weights=False)[0]
    got = ours(q, k, v, attn_mask=bias, key_padding_mask=kpm)[0]
    assert_close(got, expected, **TOL[torch.float64])


@pytest.mark.parametrize("impl", IMPLS)
def test_is_causal(impl):
    """torch's module needs the mask itself with ``is_causal`` (a hint); ours builds it."""
    ref, ours = torch_and_ours(impl)
    x, _, _ = inputs(torch.float64)
    not_allowed = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    expected = ref(x, x, x, attn_mask=not_allowed, is_causal=True, need_weights=False)[0]
    assert_close(ours(x, is_causal=True)[0], expected, **TOL[torch.float64])
    expected = ref(
        x, x, x, attn_mask=not_allowed, key_padding_mask=_padding()[:, :L], need_weights=False
    )[0]
    got = ours(x, is_causal=True, key_padding_mask=_padding()[:, :L])[0]
    assert_close(got, expected, **TOL[torch.float64])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_need_weights(impl, dtype):
    ref, ours = torch_and_ours(impl, dtype)
    q, k, v = inputs(dtype)
    kpm = _padding()
    out, weights = ours(q, k, v, key_padding_mask=kpm, need_weights=True)
    assert weights.shape == (B, H, L, S)
    ref_out, ref_avg = ref(q, k, v, key_padding_mask=kpm, need_weights=True)
    _, ref_per_head = ref(
        q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=False
    )
    assert_close(out, ref_out, **TOL[dtype])
    assert_close(weights.mean(dim=1), ref_avg, **TOL[dtype])
    assert_close(weights, ref_per_head, **TOL[dtype])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_gradients_of_inputs_and_parameters(impl, cross):
    dtype = torch.float64
    ref, ours = torch_and_ours(impl, kdim=5 if cross else None, vdim=9 if cross else None)
    q, k, v = inputs(dtype, kdim=5 if cross else E, vdim=9 if cross else E)
    if not cross:
        k = v = q
    kpm = _padding()[:, : k.shape[1]]
    g_out = torch.randn(B, L, E, dtype=dtype, generator=torch.Generator().manual_seed(4))

    xs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref_out = ref(*xs, key_padding_mask=kpm, need_weights=False)[0]
    ref_grads = torch.autograd.grad(ref_out, [*xs, *ref.parameters()], g_out)
    ys = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ours_out = ours(*ys, key_padding_mask=kpm)[0]
    ours_grads = torch.autograd.grad(ours_out, [*ys, *ours.parameters()], g_out)

    for a, b in zip(ours_grads[:3], ref_grads[:3]):
        assert_close(a, b, **TOL[dtype])
    named_ref = dict(zip([n for n, _ in ref.named_parameters()], ref_grads[3:]))
    named_ours = dict(zip([n for n, _ in ours.named_parameters()], ours_grads[3:]))
    if cross:
        W_Q, W_K, W_V = (named_ref[f"{c}_proj_weight"] for c in "qkv")
    else:
        W_Q, W_K, W_V = named_ref["in_proj_weight"].chunk(3)  # (3E, E) -> 3 x (E, E)
    b_Q, b_K, b_V = named_ref["in_proj_bias"].chunk(3)  # (3E,) -> 3 x (E,)
    expected = {
        "q_proj.weight": W_Q,
        "k_proj.weight": W_K,
        "v_proj.weight": W_V,
        "q_proj.bias": b_Q,
        "k_proj.bias": b_K,
        "v_proj.bias": b_V,
        "out_proj.weight": named_ref["out_proj.weight"],
        "out_proj.bias": named_ref["out_proj.bias"],
    }
    assert set(named_ours) == set(expected)
    for name, grad in expected.items():
        assert_close(named_ours[name], grad, **TOL[dtype], msg=name)


@pytest.mark.parametrize("impl", IMPLS)
def test_dropout_training_seeded(impl):
    """In training mode both draw the same dropout mask from the same seed (torch 2.13, CPU);
    in eval mode dropout is off."""
    ref, ours = torch_and_ours(impl, dropout=0.3)
    ref.train()
    ours.train()
    x, _, _ = inputs(torch.float64)
    torch.manual_seed(7)
    expected = ref(x, x, x, need_weights=False)[0]
    torch.manual_seed(7)
    assert_close(ours(x)[0], expected, **TOL[torch.float64])
    ref.eval()
    ours.eval()
    assert_close(ours(x)[0], ref(x, x, x, need_weights=False)[0], **TOL[torch.float64])


def test_from_torch_keeps_training_flag_and_dtype():
    ref, _ = torch_and_ours("sdpa", dtype=torch.float32, dropout=0.1)
    ref.train()
    ours = MultiHeadAttention.from_torch(ref, impl="eager")
    assert ours.training and ours.impl == "eager" and ours.dropout == 0.1
    assert ours.q_proj.weight.dtype == torch.float32
    assert (ours.embed_dim, ours.num_heads, ours.num_kv_heads, ours.head_dim) == (E, H, H, E // H)

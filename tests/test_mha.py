"""``MultiHeadAttention`` on its own: both kernels agree, GQA/MQA against torch's SDPA with
``enable_gqa``, mask shapes, ``need_weights``, dropout in training and eval, split/merge heads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TOL64
from torch.testing import assert_close

from mha_course import MultiHeadAttention, merge_heads, split_heads

B, L, S, E, H = 2, 5, 6, 12, 6


def module(num_kv_heads=None, impl="eager", dtype=torch.float64, **kw):
    torch.manual_seed(0)
    m = MultiHeadAttention(E, H, num_kv_heads=num_kv_heads, impl=impl, dtype=dtype, **kw)
    with torch.no_grad():  # random biases too (nn.Linear's default init is fine for weights)
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    return m.eval()


def data(dtype=torch.float64, kdim=E, vdim=E):
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(B, L, E, generator=g, dtype=dtype),
        torch.randn(B, S, kdim, generator=g, dtype=dtype),
        torch.randn(B, S, vdim, generator=g, dtype=dtype),
    )


def both(num_kv_heads=None, **kw):
    eager = module(num_kv_heads, "eager", **kw)
    sdpa = module(num_kv_heads, "sdpa", **kw)
    sdpa.load_state_dict(eager.state_dict())
    return eager, sdpa


@pytest.mark.parametrize("G", [None, 3, 1], ids=["MHA", "GQA", "MQA"])
def test_shapes_and_parameters(G):
    m = module(G)
    D, G = E // H, (H if G is None else G)
    assert (m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim) == (E, H, G, D)
    assert m.q_proj.weight.shape == (E, E) and m.out_proj.weight.shape == (E, E)
    assert m.k_proj.weight.shape == (G * D, E) and m.v_proj.weight.shape == (G * D, E)
    q, k, v = data()
    out, w = m(q, k, v, need_weights=True)
    assert out.shape == (B, L, E) and w.shape == (B, H, L, S)
    assert f"num_kv_heads={G}" in repr(m)


@pytest.mark.parametrize("G", [None, 3, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("variant", ["self", "cross", "causal", "bool", "float", "padding", "all"])
def test_eager_equals_sdpa(G, variant):
    eager, sdpa = both(G)
    q, k, v = data()
    if variant in ("self", "causal"):
        k = v = q
    kw = {}
    if variant in ("causal", "all"):
        kw["is_causal"] = True
    if variant in ("bool", "all"):
        kw["attn_mask"] = torch.rand(L, S, generator=torch.Generator().manual_seed(2)) > 0.3
    if variant == "float":
        kw["attn_mask"] = torch.randn(B, H, L, S, dtype=torch.float64)
    if variant in ("padding", "all"):
        kw["key_padding_mask"] = torch.arange(S).expand(B, S) >= torch.tensor([[4], [6]])
    out_e, w_e = eager(q, k, v, need_weights=True, **kw)
    assert_close(sdpa(q, k, v, **kw)[0], out_e, **TOL64)
    out_s, w_s = sdpa(q, k, v, need_weights=True, **kw)  # need_weights runs the eager kernel
    assert_close(out_s, out_e, **TOL64)
    assert_close(w_s, w_e, **TOL64)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("G", [3, 1, 6], ids=["GQA", "MQA", "MHA"])
def test_gqa_module_matches_torch_sdpa_enable_gqa(impl, G):
    """The module = projections, torch's SDPA with enable_gqa on (B, H, L, D) / (B, G, S, D),
    then W_O — written here with plain tensor ops as the oracle."""
    m = module(G, impl)
    q, k, v = data()
    D = E // H
    Q = (
        F.linear(q, m.q_proj.weight, m.q_proj.bias).reshape(B, L, H, D).transpose(1, 2)
    )  # (B, L, E) -> (B, H, L, D)
    K = (
        F.linear(k, m.k_proj.weight, m.k_proj.bias).reshape(B, S, G, D).transpose(1, 2)
    )  # (B, S, E) -> (B, G, S, D)
    V = (
        F.linear(v, m.v_proj.weight, m.v_proj.bias).reshape(B, S, G, D).transpose(1, 2)
    )  # (B, S, E) -> (B, G, S, D)
    heads = F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)  # (B, H, L, D)
    expected = m.out_proj(heads.transpose(1, 2).reshape(B, L, E))  # (B, H, L, D) -> (B, L, E)
    assert_close(m(q, k, v)[0], expected, **TOL64)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_attn_mask_shapes_are_equivalent(impl):
    m = module(3, impl)
    q, k, v = data()
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(5)) > 0.3
    mask[:, 0] = True
    ref = m(q, k, v, attn_mask=mask)[0]
    assert_close(m(q, k, v, attn_mask=mask.expand(B, L, S))[0], ref, **TOL64)
    assert_close(m(q, k, v, attn_mask=mask.expand(B, H, L, S))[0], ref, **TOL64)
    assert_close(m(q, k, v, attn_mask=mask[None, None])[0], ref, **TOL64)
    additive = torch.zeros(L, S, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    assert_close(m(q, k, v, attn_mask=additive)[0], ref, **TOL64)
    assert not torch.allclose(m(q, k, v)[0], ref)


def test_key_value_default_to_query():
    m = module()
    x, _, _ = data()
    assert torch.equal(m(x)[0], m(x, x, x)[0])
    assert torch.equal(m(x, x)[0], m(x, x, x)[0])


@pytest.mark.parametrize("G", [None, 2], ids=["MHA", "GQA"])
def test_dropout_only_while_training(G):
    eager, sdpa = both(G, dropout=0.4)
    x, _, _ = data()
    no_dropout = eager(x)[0]
    assert torch.equal(sdpa(x)[0], sdpa(x)[0])  # eval: deterministic ...
    assert_close(sdpa(x)[0], no_dropout, **TOL64)  # ... and no dropout at all
    eager.train()
    sdpa.train()
    torch.manual_seed(3)
    out_e = eager(x)[0]
    assert not torch.allclose(out_e, no_dropout)
    torch.manual_seed(3)  # same seed, same dropout mask on the (B, H, L, S) weights
    assert_close(sdpa(x)[0], out_e, **TOL64)


def test_float32_module():
    eager, sdpa = both(2, dtype=torch.float32)
    x, _, _ = data(torch.float32)
    assert_close(sdpa(x, is_causal=True)[0], eager(x, is_causal=True)[0], rtol=1e-5, atol=1e-5)


def test_split_and_merge_heads():
    x = torch.arange(2 * 3 * 8, dtype=torch.float64).reshape(2, 3, 8)  # (B, T, H*D), H=4, D=2
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])  # head 2 of token 0 = features 4..5
    assert torch.equal(merge_heads(heads), x)
    wrong = x.view(2, 4, 3, 2)  # reshape without transpose mixes tokens into one head
    assert not torch.equal(wrong, heads)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_fully_padded_sequence_gives_zero_heads(impl):
    """A sequence whose keys are all padding attends to nothing: every head outputs 0 (as torch's
    SDPA), so the module returns W_O's bias — not NaN — and the other sequence is unaffected."""
    m = module(3, impl)
    q, k, v = data()
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1] = True
    out, _ = m(q, k, v, key_padding_mask=kpm)
    assert_close(out[1], m.out_proj.bias.expand(L, E), **TOL64)
    assert_close(out[0], m(q, k, v)[0][0], **TOL64)

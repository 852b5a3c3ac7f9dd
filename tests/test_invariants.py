"""Invariants of attention that hold whatever the weights: causality, permutation
equivariance, padding, MHA = GQA with G = H, GQA = MHA with repeated key/value heads, exact
parameter counts, gradcheck of the module, and head_mask."""

from __future__ import annotations

import pytest
import torch
from conftest import IMPLS, TOL64
from torch.testing import assert_close

from mha_course import MultiHeadAttention

B, T, E, H = 2, 6, 12, 4
D = E // H


def module(num_kv_heads=None, impl="eager", seed=0, **kw):
    torch.manual_seed(seed)
    m = MultiHeadAttention(E, H, num_kv_heads=num_kv_heads, impl=impl, dtype=torch.float64, **kw)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    return m.eval()


def tokens(n=T, seed=1, width=E):
    return torch.randn(
        B, n, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_causal_outputs_ignore_the_future(impl, G):
    m = module(G, impl)
    x = tokens()
    out = m(x, is_causal=True)[0]
    t = 3
    x_future = x.clone()
    x_future[:, t + 1 :] = torch.randn(B, T - t - 1, E, dtype=torch.float64) * 5
    out_future = m(x_future, is_causal=True)[0]
    assert_close(out_future[:, : t + 1], out[:, : t + 1], **TOL64)
    assert not torch.allclose(out_future[:, t + 1 :], out[:, t + 1 :])  # later tokens did change
    assert not torch.allclose(m(x_future)[0][:, : t + 1], m(x)[0][:, : t + 1])  # no mask: leaks


@pytest.mark.parametrize("impl", IMPLS)
def test_num_kv_heads_equal_to_num_heads_is_mha(impl):
    mha = module(None, impl)
    same = MultiHeadAttention(E, H, num_kv_heads=H, impl=impl, dtype=torch.float64).eval()
    same.load_state_dict(mha.state_dict())
    x = tokens()
    assert torch.equal(same(x, is_causal=True)[0], mha(x, is_causal=True)[0])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("G", [2, 1], ids=["GQA", "MQA"])
def test_gqa_equals_mha_with_repeated_kv_heads(impl, G):
    """Build a GQA module from an MHA by keeping the first key/value head of each group; it equals
    an MHA whose key/value heads are those kept heads repeated (repeat_interleave) — contiguous
    groups, query head h reading key/value head h // (H / G)."""
    mha = module(None, impl)
    gqa = MultiHeadAttention(E, H, num_kv_heads=G, impl=impl, dtype=torch.float64).eval()
    repeated = MultiHeadAttention(E, H, impl=impl, dtype=torch.float64).eval()
    n_rep = H // G
    keep = torch.arange(0, H, n_rep)  # the first head of each group
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            for target in (gqa, repeated):
                getattr(target, name).load_state_dict(getattr(mha, name).state_dict())
        for name in ("k_proj", "v_proj"):
            W = getattr(mha, name).weight.reshape(H, D, E)  # (H*D, E) -> (H, D, E)
            b = getattr(mha, name).bias.reshape(H, D)  # (H*D,) -> (H, D)
            getattr(gqa, name).weight.copy_(W[keep].reshape(G * D, E))  # (G, D, E) -> (G*D, E)
            getattr(gqa, name).bias.copy_(b[keep].reshape(G * D))  # (G, D) -> (G*D,)
            W_rep = W[keep].repeat_interleave(n_rep, dim=0)  # (G, D, E) -> (H, D, E)
            b_rep = b[keep].repeat_interleave(n_rep, dim=0)  # (G, D) -> (H, D)
            getattr(repeated, name).weight.copy_(W_rep.reshape(H * D, E))  # (H, D, E) -> (H*D, E)
            getattr(repeated, name).bias.copy_(b_rep.reshape(H * D))  # (H, D) -> (H*D,)
    x, memory = tokens(), tokens(5, seed=2)
    assert_close(gqa(x, is_causal=True)[0], repeated(x, is_causal=True)[0], **TOL64)
    assert_close(gqa(x, memory)[0], repeated(x, memory)[0], **TOL64)
    # The wrong grouping (repeat instead of repeat_interleave) gives another answer.
    with torch.no_grad():
        for name in ("k_proj", "v_proj"):
            W = getattr(gqa, name).weight.reshape(G, D, E)  # (G*D, E) -> (G, D, E)
            getattr(repeated, name).weight.copy_(W.repeat(n_rep, 1, 1).reshape(H * D, E))
    if G > 1:
        assert not torch.allclose(gqa(x)[0], repeated(x)[0])


@pytest.mark.parametrize("G", [4, 2, 1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kdim,vdim", [(None, None), (5, 7)])
def test_parameter_count_formula(G, bias, kdim, vdim):
    """W_Q and W_O are E x E; W_K and W_V map kdim / vdim to G * D, so MQA/GQA shrink only them."""
    m = MultiHeadAttention(E, H, num_kv_heads=G, bias=bias, kdim=kdim, vdim=vdim)
    kd, vd = kdim or E, vdim or E
    expected = 2 * E * E + (kd + vd) * G * D + (2 * E + 2 * G * D if bias else 0)
    assert sum(p.numel() for p in m.parameters()) == expected


@pytest.mark.parametrize("impl", IMPLS)
def test_self_attention_is_permutation_equivariant(impl):
    m = module(2, impl)
    x = tokens()
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert_close(m(x[:, perm])[0], m(x)[0][:, perm], **TOL64)
    # A causal mask breaks the symmetry (position matters) — the test can tell.
    assert not torch.allclose(m(x[:, perm], is_causal=True)[0], m(x, is_causal=True)[0][:, perm])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_values_at_padded_keys_do_not_matter(impl, kind):
    m = module(2, impl)
    x, memory = tokens(4), tokens(7, seed=2)
    padding = torch.arange(7).expand(B, 7) >= torch.tensor([[5], [3]])  # lengths 5 and 3
    kpm = (
        padding
        if kind == "bool"
        else torch.zeros(B, 7, dtype=torch.float64).masked_fill(padding, float("-inf"))
    )
    out = m(x, memory, key_padding_mask=kpm)[0]
    changed = memory.clone()
    changed[padding] = 100.0 * torch.randn(int(padding.sum()), E, dtype=torch.float64)
    assert_close(m(x, changed, key_padding_mask=kpm)[0], out, **TOL64)
    assert not torch.allclose(m(x, changed)[0], m(x, memory)[0])  # without the mask they count


def test_module_gradcheck():
    m = MultiHeadAttention(6, 2, num_kv_heads=1, impl="eager", dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 6, dtype=torch.float64, generator=g, requires_grad=True)
    memory = torch.randn(1, 4, 6, dtype=torch.float64, generator=g, requires_grad=True)
    kpm = torch.tensor([[False, False, False, True]])
    assert torch.autograd.gradcheck(lambda a: m(a, is_causal=True)[0], (x,))
    assert torch.autograd.gradcheck(lambda a, b: m(a, b, key_padding_mask=kpm)[0], (x, memory))
    params = tuple(m.parameters())
    x_fixed = x.detach()

    def by_params(*ps):
        return torch.func.functional_call(
            m, dict(zip([n for n, _ in m.named_parameters()], ps)), (x_fixed,), {"is_causal": True}
        )[0]

    assert torch.autograd.gradcheck(by_params, params, fast_mode=True)  # 8 tensors: fast mode


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("G", [None, 2], ids=["MHA", "GQA"])
def test_head_mask_zeroes_a_head_exactly(impl, G):
    """head_mask[h] = 0 equals zeroing head h's D input columns of W_O."""
    m = module(G, impl)
    x = tokens()
    h = 1
    head_mask = torch.ones(H, dtype=torch.float64)
    head_mask[h] = 0.0
    pruned = module(G, impl)
    with torch.no_grad():
        pruned.out_proj.weight[:, h * D : (h + 1) * D] = 0.0  # head h's slice of W_O's input
    assert_close(m(x, head_mask=head_mask)[0], pruned(x)[0], **TOL64)
    assert not torch.allclose(m(x)[0], pruned(x)[0])
    # (B, H) masks act per sequence; all ones changes nothing.
    per_seq = torch.ones(B, H, dtype=torch.float64)
    per_seq[0, h] = 0.0
    out = m(x, head_mask=per_seq)[0]
    assert_close(out[0], pruned(x)[0][0], **TOL64)
    assert_close(out[1], m(x)[0][1], **TOL64)
    assert_close(m(x, head_mask=torch.ones(H, dtype=torch.float64))[0], m(x)[0], **TOL64)

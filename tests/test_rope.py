"""RoPE (chapter 12): the rotation against a complex-number oracle in both layouts, the relative
property (q_m · k_n depends only on m - n), norms kept, the two layouts equal up to a fixed
feature permutation, the weight converter, and errors that name the argument."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from mha_course import (
    MultiHeadAttention,
    apply_rope,
    convert_rope_layout,
    rope_angles,
    rope_frequencies,
    rope_permutation,
)

F64 = {"rtol": 1e-12, "atol": 1e-12}
LAYOUTS = ["half", "interleaved"]


def complex_rope(x: torch.Tensor, positions: torch.Tensor, layout: str, base: float = 10000.0):
    """Oracle: each feature pair is a complex number multiplied by exp(i m theta_j)."""
    D = x.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    rot = torch.polar(
        torch.ones(len(positions), D // 2, dtype=torch.float64), positions.double()[:, None] * theta
    )  # (L, D/2) complex
    if layout == "interleaved":
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(z * rot).reshape(x.shape)
    z = torch.complex(x[..., : D // 2], x[..., D // 2 :])
    out = z * rot
    return torch.cat([out.real, out.imag], dim=-1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_matches_complex_rotation(layout, base):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 11, 100, 4097])
    assert_close(
        apply_rope(x, pos, layout=layout, base=base), complex_rope(x, pos, layout, base), **F64
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_position_zero_is_identity_and_norms_are_kept(layout):
    torch.manual_seed(0)
    x = torch.randn(3, 9, 32, dtype=torch.float64)
    assert torch.equal(apply_rope(x, torch.zeros(9, dtype=torch.long), layout=layout), x)
    y = apply_rope(x, torch.arange(1000, 1009), layout=layout)
    assert_close(y.norm(dim=-1), x.norm(dim=-1), **F64)
    assert not torch.allclose(y, x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dot_product_depends_only_on_the_offset(layout):
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 16, dtype=torch.float64)

    def score(m, n):
        qm = apply_rope(q, torch.tensor([m]), layout=layout)
        kn = apply_rope(k, torch.tensor([n]), layout=layout)
        return (qm * kn).sum()

    for delta in (0, 1, 3, -4, 37):
        ref = score(delta, 0) if delta >= 0 else score(0, -delta)
        for m in (50, 123, 999):
            assert_close(
                score(m + delta, m) if delta >= 0 else score(m, m - delta),
                ref,
                rtol=1e-10,
                atol=1e-10,
            )
    assert not torch.allclose(score(1, 0), score(5, 0))  # the offset does matter


def test_layouts_agree_up_to_the_feature_permutation():
    torch.manual_seed(0)
    D = 12
    perm = rope_permutation(D)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]
    x = torch.randn(2, 4, 6, D, dtype=torch.float64)
    pos = torch.arange(3, 9)
    assert_close(
        apply_rope(x[..., perm], pos, layout="half"),
        apply_rope(x, pos, layout="interleaved")[..., perm],
        **F64,
    )
    # same scores: q·k is invariant when both vectors are permuted the same way
    q, k = torch.randn(2, 1, 6, D, dtype=torch.float64)
    s_inter = apply_rope(q, pos, layout="interleaved") @ apply_rope(k, pos, layout="interleaved").mT
    s_half = (
        apply_rope(q[..., perm], pos, layout="half")
        @ apply_rope(k[..., perm], pos, layout="half").mT
    )
    assert_close(s_half, s_inter, **F64)
    # without the permutation the layouts disagree: the mix-up the chapter warns about
    s_wrong = apply_rope(q, pos, layout="half") @ apply_rope(k, pos, layout="half").mT
    assert not torch.allclose(s_wrong, s_inter)


def test_per_batch_positions_equal_separate_calls():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)  # (B, H, L, D)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])  # (B, L)
    out = apply_rope(x, pos)
    for b in range(2):
        assert_close(out[b], apply_rope(x[b], pos[b]), **F64)


def test_angles_and_frequencies():
    theta = rope_frequencies(8, base=100.0)
    assert_close(
        theta, torch.tensor([1.0, 100**-0.25, 100**-0.5, 100**-0.75], dtype=torch.float64), **F64
    )
    cos, sin = rope_angles(torch.arange(4), 8, base=100.0)
    assert cos.shape == sin.shape == (4, 4) and cos.dtype == torch.float64
    assert_close(cos**2 + sin**2, torch.ones(4, 4, dtype=torch.float64), **F64)
    assert_close(torch.atan2(sin[1], cos[1]), theta, **F64)
    assert rope_angles(torch.arange(4), 8, dtype=torch.float32)[0].dtype == torch.float32


@pytest.mark.parametrize("to", ["half", "interleaved"])
@pytest.mark.parametrize("G", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_converter_makes_the_two_layouts_equal(to, G):
    torch.manual_seed(0)
    src = "interleaved" if to == "half" else "half"
    E, H = 24, 4
    a = MultiHeadAttention(E, H, num_kv_heads=G, rope=src, impl="eager", dtype=torch.float64)
    b = MultiHeadAttention(E, H, num_kv_heads=G, rope=to, impl="eager", dtype=torch.float64)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 7, E, dtype=torch.float64)
    ref, ref_w = a(x, is_causal=True, need_weights=True)
    wrong = b(x, is_causal=True)[0]
    assert not torch.allclose(wrong, ref)  # same weights, other layout: a different model
    with torch.no_grad():
        for proj, heads in ((b.q_proj, a.num_heads), (b.k_proj, a.num_kv_heads)):
            proj.weight.copy_(convert_rope_layout(proj.weight, heads, a.head_dim, to=to))
            proj.bias.copy_(convert_rope_layout(proj.bias, heads, a.head_dim, to=to))
    out, w = b(x, is_causal=True, need_weights=True)
    assert_close(out, ref, **F64)
    assert_close(w, ref_w, **F64)


def test_converter_round_trip():
    torch.manual_seed(0)
    w = torch.randn(3 * 8, 5)
    there = convert_rope_layout(w, 3, 8, to="half")
    assert not torch.equal(there, w)
    assert torch.equal(convert_rope_layout(there, 3, 8, to="interleaved"), w)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: apply_rope(torch.randn(2, 5, 7), torch.arange(5)), "x:"),
        (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(4)), "positions:"),
        (
            lambda: apply_rope(torch.randn(2, 5, 8), torch.zeros(3, 5, dtype=torch.long)),
            "positions:",
        ),
        (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(5), layout="neox"), "layout:"),
        (lambda: apply_rope(torch.randn(2, 5, 8), torch.arange(5), base=1.0), "base:"),
        (lambda: apply_rope(torch.arange(8).reshape(1, 8), torch.arange(1)), "x:"),
        (lambda: apply_rope(torch.randn(8), torch.arange(1)), "x:"),
        (lambda: rope_permutation(7), "head_dim:"),
        (lambda: convert_rope_layout(torch.randn(20, 4), 3, 8), "weight:"),
        (lambda: convert_rope_layout(torch.randn(24, 4), 3, 8, to="x"), "to:"),
        (lambda: convert_rope_layout(torch.randn(24, 4), 0, 8), "num_heads:"),
        (lambda: MultiHeadAttention(12, 4, rope="half"), "rope:"),
        (lambda: MultiHeadAttention(16, 4, rope="both"), "rope:"),
        (lambda: MultiHeadAttention(16, 4, rope="half", rope_base=0.5), "rope_base:"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()

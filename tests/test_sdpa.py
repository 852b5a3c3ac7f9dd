"""``mha_course.scaled_dot_product_attention`` against ``torch.nn.functional.scaled_dot_product_attention``.

Every argument combination the contract names: bool and float masks, ``is_causal`` (L == S and
L != S), ``scale``, ``enable_gqa`` (H/G = 1, 2, H), ``return_weights``, Dv != D, extra batch
dimensions, fully masked rows, dropout, and input gradients. float64 with tight tolerances,
float32 at ~1e-5.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TOL
from torch.testing import assert_close

from mha_course import scaled_dot_product_attention, stable_softmax

DTYPES = [torch.float64, torch.float32]


def qkv(batch, L, S, D, Dv, dtype, H=None, G=None, seed=0):
    """Random query (*batch, [H,] L, D), key (*batch, [G,] S, D), value (*batch, [G,] S, Dv)."""
    g = torch.Generator().manual_seed(seed)
    qh = () if H is None else (H,)
    kh = () if G is None else (G,)
    q = torch.randn(*batch, *qh, L, D, generator=g, dtype=dtype)
    k = torch.randn(*batch, *kh, S, D, generator=g, dtype=dtype)
    v = torch.randn(*batch, *kh, S, Dv, generator=g, dtype=dtype)
    return q, k, v


def make_mask(kind, L, S, dtype, seed=1):
    """A bool (True = may attend) or additive float mask of shape (L, S); every row keeps a key."""
    if kind is None:
        return None
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(L, S, generator=g) > 0.4
    allowed[:, 0] = True  # no fully masked row here (tested separately)
    if kind == "bool":
        return allowed
    bias = torch.randn(L, S, generator=g, dtype=dtype)  # a float mask is added, not only 0/-inf
    return bias.masked_fill(~allowed, float("-inf"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("scale", [None, 0.37])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3)], ids=["no-batch", "B", "B,H"])
def test_matches_torch_masks_scale_batch(dtype, mask_kind, scale, batch):
    q, k, v = qkv(batch, L=4, S=6, D=5, Dv=7, dtype=dtype)  # Dv != D, L != S
    mask = make_mask(mask_kind, 4, 6, dtype)
    ours = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    assert ours.shape == (*batch, 4, 7)
    assert_close(ours, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,S", [(5, 5), (3, 7), (7, 3)], ids=["L=S", "L<S", "L>S"])
def test_is_causal_matches_torch(dtype, L, S):
    q, k, v = qkv((2, 3), L, S, D=4, Dv=6, dtype=dtype)
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(ours, ref, **TOL[dtype])
    # The causal mask matters: without it the outputs differ.
    assert not torch.allclose(ours, scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("G", [6, 3, 1], ids=["H/G=1", "H/G=2", "H/G=H"])
@pytest.mark.parametrize("variant", ["plain", "bool", "float", "causal"])
def test_enable_gqa_matches_torch(dtype, G, variant):
    H, L, S = 6, 4, 5
    q, k, v = qkv((2,), L, S, D=3, Dv=5, dtype=dtype, H=H, G=G)
    mask = make_mask(variant, L, S, dtype) if variant in ("bool", "float") else None
    causal = variant == "causal"
    kw = {"attn_mask": mask, "is_causal": causal, "enable_gqa": True}
    ours = scaled_dot_product_attention(q, k, v, **kw)
    assert_close(ours, F.scaled_dot_product_attention(q, k, v, **kw), **TOL[dtype])
    # ... and equals plain attention over key/value heads repeated in contiguous groups.
    k_rep, v_rep = k.repeat_interleave(H // G, dim=-3), v.repeat_interleave(H // G, dim=-3)
    plain = F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=mask, is_causal=causal)
    assert_close(ours, plain, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["plain", "bool", "float", "causal", "gqa"])
def test_return_weights(dtype, variant):
    """Torch returns no weights, but with value = identity (S x S) its output IS the weights."""
    H, G, L, S = 4, (2 if variant == "gqa" else 4), 5, 5
    q, k, v = qkv((2,), L, S, D=3, Dv=6, dtype=dtype, H=H, G=G)
    mask = make_mask(variant, L, S, dtype) if variant in ("bool", "float") else None
    kw = {"attn_mask": mask, "is_causal": variant == "causal", "enable_gqa": variant == "gqa"}
    out, weights = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    assert weights.shape == (2, H, L, S)
    eye = torch.eye(S, dtype=dtype).expand(2, G, S, S)
    assert_close(weights, F.scaled_dot_product_attention(q, k, eye, **kw), **TOL[dtype])
    assert_close(weights.sum(-1), torch.ones(2, H, L, dtype=dtype), **TOL[dtype])
    assert_close(out, scaled_dot_product_attention(q, k, v, **kw), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_like_torch(dtype, mask_kind):
    q, k, v = qkv((2,), L=4, S=5, D=3, Dv=3, dtype=dtype)
    for t in (q, k, v):
        t.requires_grad_(True)
    allowed = torch.ones(4, 5, dtype=torch.bool)
    allowed[1] = False  # query 1 may attend to nothing
    allowed[3, 2:] = False
    mask = (
        allowed
        if mask_kind == "bool"
        else torch.zeros(4, 5, dtype=dtype).masked_fill(~allowed, float("-inf"))
    )
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask, return_weights=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1]))
    assert torch.equal(weights[:, 1], torch.zeros_like(weights[:, 1]))
    assert_close(out, ref, **TOL[dtype])
    # Gradients stay finite and match torch's.
    ours_grads = torch.autograd.grad(out.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(ours_grads, ref_grads):
        assert torch.isfinite(a).all()
        assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("variant", ["bool", "float", "causal", "gqa"])
def test_input_gradients_match_torch(variant):
    dtype = torch.float64
    q, k, v = qkv((2,), L=4, S=4, D=3, Dv=5, dtype=dtype, H=4, G=2 if variant == "gqa" else 4)
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = make_mask(variant, 4, 4, dtype) if variant in ("bool", "float") else None
    kw = {
        "attn_mask": mask,
        "is_causal": variant == "causal",
        "enable_gqa": variant == "gqa",
        "scale": 0.8,
    }
    g_out = torch.randn(2, 4, 4, 5, dtype=dtype, generator=torch.Generator().manual_seed(3))
    ours = torch.autograd.grad(scaled_dot_product_attention(q, k, v, **kw), (q, k, v), g_out)
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, **kw), (q, k, v), g_out)
    for a, b in zip(ours, ref):
        assert_close(a, b, **TOL[dtype])


def test_gradcheck():
    q, k, v = qkv((1, 2), L=3, S=4, D=2, Dv=3, dtype=torch.float64)
    mask = make_mask("float", 3, 4, torch.float64)
    for t in (q, k, v):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, attn_mask=mask), (q, k, v)
    )
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v)
    )


# ---- dropout ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_zero_is_identity(dtype):
    q, k, v = qkv((2,), 4, 6, 3, 5, dtype)
    assert torch.equal(
        scaled_dot_product_attention(q, k, v, dropout_p=0.0), scaled_dot_product_attention(q, k, v)
    )


def test_dropout_one_gives_zeros_like_torch():
    q, k, v = qkv((2,), 4, 6, 3, 5, torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=1.0, return_weights=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(
        weights, torch.zeros_like(weights)
    )
    assert torch.equal(
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.0), torch.zeros_like(out)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_seeded_matches_torch(dtype):
    """Torch's CPU math kernel draws its dropout mask like ``F.dropout`` on the weights, so with
    the same seed the two agree exactly (measured on torch 2.13)."""
    q, k, v = qkv((2, 3), 5, 6, 4, 4, dtype)
    torch.manual_seed(123)
    ours = scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(123)
    ref = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert_close(ours, ref, **TOL[dtype])
    assert not torch.allclose(ours, scaled_dot_product_attention(q, k, v))  # dropout acted


def test_dropout_statistics():
    """Each weight is zeroed with probability p and the survivors are scaled by 1 / (1 - p), so
    the expected weights are unchanged."""
    torch.manual_seed(0)
    p, n = 0.25, 200
    q, k, v = qkv((n,), 8, 8, 4, 4, torch.float64)
    _, clean = scaled_dot_product_attention(q, k, v, return_weights=True)
    _, dropped = scaled_dot_product_attention(q, k, v, dropout_p=p, return_weights=True)
    zero_fraction = (dropped == 0).double().mean().item()
    assert abs(zero_fraction - p) < 0.02  # 12,800 Bernoulli draws: std ~0.004
    kept = dropped != 0
    assert_close(dropped[kept], clean[kept] / (1 - p), rtol=1e-12, atol=0.0)
    assert abs(dropped.sum(-1).mean().item() - 1.0) < 0.02


# ---- stable_softmax -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_stable_softmax_matches_torch_and_survives_large_scores(dtype):
    x = torch.randn(3, 7, dtype=dtype, generator=torch.Generator().manual_seed(0)) * 1000
    assert torch.isfinite(stable_softmax(x)).all()
    assert_close(stable_softmax(x), torch.softmax(x, dim=-1), **TOL[dtype])
    assert_close(stable_softmax(x, dim=0), torch.softmax(x, dim=0), **TOL[dtype])
    x[1] = float("-inf")
    assert torch.equal(stable_softmax(x)[1], torch.zeros(7, dtype=dtype))


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("variant", ["plain", "gqa", "weights"])
def test_no_keys_s0_matches_torch(is_causal, variant):
    """S = 0 (no keys at all): torch returns zeros of shape (..., L, Dv), so do we (not IndexError)."""
    H, G = (4, 2) if variant == "gqa" else (None, None)
    q, k, v = qkv((2,), 3, 0, 8, 5, torch.float64, H=H, G=G)
    kw = {"is_causal": is_causal, "enable_gqa": variant == "gqa"}
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    if variant == "weights":
        got, w = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
        assert w.shape == (*q.shape[:-1], 0)
    else:
        got = scaled_dot_product_attention(q, k, v, **kw)
    assert got.shape == want.shape == (*q.shape[:-1], 5)
    assert_close(got, want, **TOL[torch.float64])

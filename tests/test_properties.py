"""Property-based tests (hypothesis): random shapes (B, H, G | H, L, S, D, Dv) and masks, compared
with torch's SDPA and ``nn.MultiheadAttention``. Hypothesis draws the shapes, flags and a seed;
the tensors come from ``torch.randn`` with that seed (fast, and well-conditioned for tight
float64 tolerances). Few examples and no deadline, so the file runs in seconds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from conftest import TOL64
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from mha_course import KVCache, MultiHeadAttention, scaled_dot_product_attention

FEW = settings(max_examples=25, deadline=None)
small = st.integers(1, 5)


@st.composite
def heads(draw):
    """(H, G) with G dividing H."""
    G = draw(st.integers(1, 3))
    return G * draw(st.integers(1, 3)), G


def random_mask(g, kind, shape, dtype=torch.float64):
    if kind == "none":
        return None
    allowed = torch.rand(*shape, generator=g) > 0.5  # fully masked rows allowed: torch gives zeros
    if kind == "bool":
        return allowed
    return torch.randn(*shape, generator=g, dtype=dtype).masked_fill(~allowed, float("-inf"))


@FEW
@given(
    B=small,
    hg=heads(),
    L=small,
    S=small,
    D=small,
    Dv=small,
    seed=st.integers(0, 2**31),
    mask=st.sampled_from(["none", "bool", "float", "causal"]),
    mask_dims=st.sampled_from(["L,S", "H,L,S", "B,1,L,S"]),
    scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
    gqa=st.booleans(),
)
def test_sdpa_matches_torch(B, hg, L, S, D, Dv, seed, mask, mask_dims, scale, gqa):
    H, G = hg if gqa else (hg[0], hg[0])
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, G, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, G, S, Dv, generator=g, dtype=torch.float64)
    shape = {"L,S": (L, S), "H,L,S": (H, L, S), "B,1,L,S": (B, 1, L, S)}[mask_dims]
    attn_mask = random_mask(g, mask if mask != "causal" else "none", shape)
    kw = {"attn_mask": attn_mask, "is_causal": mask == "causal", "scale": scale, "enable_gqa": gqa}
    out, weights = scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    assert out.shape == (B, H, L, Dv) and weights.shape == (B, H, L, S)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, **kw), **TOL64)
    # Each row of weights is a distribution (or all zeros when every key is masked), so each
    # output lies within the range of the values it mixes.
    row_sums = weights.sum(-1)
    assert bool(((row_sums - 1).abs() < 1e-12).logical_or(row_sums == 0).all())
    assert bool((weights >= 0).all())


@FEW
@given(
    B=small,
    H=st.integers(1, 3),
    D=st.integers(1, 3),
    L=small,
    S=small,
    seed=st.integers(0, 2**31),
    cross=st.booleans(),
    kdim=st.integers(1, 6),
    vdim=st.integers(1, 6),
    bias=st.booleans(),
    mask=st.sampled_from(["none", "bool", "float"]),
    padding=st.booleans(),
    impl=st.sampled_from(["eager", "sdpa"]),
)
def test_module_matches_torch_multihead_attention(
    B, H, D, L, S, seed, cross, kdim, vdim, bias, mask, padding, impl
):
    E = H * D
    if not cross:
        S, kdim, vdim = L, E, E
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(
        E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True, dtype=torch.float64
    ).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    ours = MultiHeadAttention.from_torch(ref, impl=impl)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, L, E, generator=g, dtype=torch.float64)
    k = torch.randn(B, S, kdim, generator=g, dtype=torch.float64) if cross else q
    v = torch.randn(B, S, vdim, generator=g, dtype=torch.float64) if cross else q
    attn_mask = random_mask(g, mask, (L, S))
    if attn_mask is not None:  # keep key 0 visible: torch's module returns NaN on empty rows
        attn_mask[:, 0] = True if mask == "bool" else 0.0
    kpm = None
    if padding:
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        kpm = torch.arange(S) >= lengths[:, None]  # (S,) vs (B, 1) -> (B, S), True = padding
        if mask == "float":  # one mask type at a time for torch (it warns on a mix)
            kpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(kpm, float("-inf"))
    torch_mask = ~attn_mask if mask == "bool" else attn_mask  # torch: True = NOT allowed
    expected = ref(q, k, v, attn_mask=torch_mask, key_padding_mask=kpm, need_weights=False)[0]
    assert_close(ours(q, k, v, attn_mask=attn_mask, key_padding_mask=kpm)[0], expected, **TOL64)


@FEW
@given(
    B=small,
    hg=heads(),
    D=st.integers(1, 3),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    seed=st.integers(0, 2**31),
    impl=st.sampled_from(["eager", "sdpa"]),
)
def test_kv_cache_decoding_equals_full_forward(B, hg, D, chunks, seed, impl):
    H, G = hg
    torch.manual_seed(seed)
    m = MultiHeadAttention(H * D, H, num_kv_heads=G, impl=impl, dtype=torch.float64).eval()
    x = torch.randn(B, sum(chunks), H * D, dtype=torch.float64)
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        outs.append(m(x[:, start : start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    assert_close(torch.cat(outs, dim=1), m(x, is_causal=True)[0], **TOL64)

"""Issue 19, item 9: a submission that disarms the tripwires (they live in its own process) and
calls torch's reference operator under another name earns nothing on the redesigned items.

Each body below is what such a submission writes: it empties the tripwires' armed set, reaches
the library function through ``getattr`` (so the source search finds no forbidden name) and
returns what the library returns. The items now ask for what the library does not return (the
attention weights, the per-head outputs, the masked scores, each row's log-sum-exp), so the
library's answer alone scores 0; before the redesign each of these scored full marks (run on the
tree before it: 9 of 9 failed). What is left per item is in docs/instructor_guide.md's table.
"""

from __future__ import annotations

import pytest
from grading_helpers import build, grade_many

DISARM = """
    import gc, torch
    for o in gc.get_objects():
        if type(o).__name__ == "Tripwires":
            o.armed = set()
    F = torch.nn.functional
    sdpa = getattr(F, "scaled_dot_" + "product_attention")
    MHA = getattr(torch.nn, "Multihead" + "Attention")
"""

CROSS_MHA = """
    E, M = W_K.shape  # an nn.MultiheadAttention with kdim = vdim = M holding the given weights
    m = MHA(E, num_heads, bias=False, kdim=M, vdim=M, batch_first=True, dtype=query.dtype).requires_grad_(False)
    if m._qkv_same_embed_dim:
        m.in_proj_weight.copy_(torch.cat([W_Q, W_K, W_V]))
    else:
        m.q_proj_weight.copy_(W_Q)
        m.k_proj_weight.copy_(W_K)
        m.v_proj_weight.copy_(W_V)
    m.out_proj.weight.copy_(W_O)"""

CHEATS: dict[str, tuple[str, str]] = {  # item -> (exercise, the learner's cell)
    "ex01_attend": (
        "ex01",
        """
def attend(query, keys, values):"""
        + DISARM
        + """
    q, k, v = (torch.from_numpy(a)[None] for a in (query, keys, values))  # (L, D) -> (1, L, D)
    return sdpa(q, k, v, scale=1.0)[0].numpy()
""",
    ),
    "ex02_attention": (
        "ex02",
        """
def attention(query, key, value, attn_mask=None):"""
        + DISARM
        + """
    return sdpa(query, key, value, attn_mask=attn_mask)
""",
    ),
    "ex03_head_forward": (
        "ex03",
        """
def self_attention_head(x, W_Q, W_K, W_V):"""
        + DISARM
        + """
    return sdpa(x @ W_Q, x @ W_K, x @ W_V)
""",
    ),
    "ex04_mha_forward": (
        "ex04",
        """
def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):"""
        + DISARM
        + """
    E = x.shape[-1]
    m = MHA(E, num_heads, bias=False, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))  # (in, out) -> nn.Linear's (out, in)
        m.out_proj.weight.copy_(W_O.T)
        return m(x, x, x, need_weights=False)[0]
""",
    ),
    "ex04_fix_packed_mha": (
        "ex04",
        """
def packed_mha(x, in_proj_weight, out_proj_weight, num_heads):"""
        + DISARM
        + """
    m = MHA(x.shape[-1], num_heads, bias=False, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(in_proj_weight)
        m.out_proj.weight.copy_(out_proj_weight)
        return m(x, x, x, need_weights=False)[0]
""",
    ),
    "ex06_cross_weights": (
        "ex06",
        """
def cross_attention_weights(query, memory, W_Q, W_K, num_heads, key_padding_mask=None):"""
        + DISARM
        + """
    W_V, W_O = W_K, torch.eye(W_Q.shape[0], dtype=W_Q.dtype)  # any: only the weights are used"""
        + CROSS_MHA
        + """
    return m(query, memory, memory, key_padding_mask=key_padding_mask, average_attn_weights=False)[1]
""",
    ),
    "ex06_cross_attention": (
        "ex06",
        """
def cross_attention(query, memory, W_Q, W_K, W_V, W_O, num_heads, key_padding_mask=None):"""
        + DISARM
        + CROSS_MHA
        + """
    return m(query, memory, memory, key_padding_mask=key_padding_mask, need_weights=False)[0]
""",
    ),
    "ex07_gqa_forward": (
        "ex07",
        """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):"""
        + DISARM
        + """
    B, T, E = x.shape
    D = E // num_heads
    q = (x @ W_Q.T).view(B, T, num_heads, D).transpose(1, 2)
    k, v = ((x @ W.T).view(B, T, num_kv_heads, D).transpose(1, 2) for W in (W_K, W_V))
    out = sdpa(q, k, v, enable_gqa=True)  # (B, H, T, D)
    return out.transpose(1, 2).reshape(B, T, E) @ W_O.T
""",
    ),
    "ex09_tiled_attention": (
        "ex09",
        """
def blockwise_attention(query, key, value, block_q, block_k, is_causal):"""
        + DISARM
        + """
    q, k, v = (t.reshape(-1, 1, *t.shape[-2:]) for t in (query, key, value))  # (..., L, D) -> (N, 1, L, D)
    out = sdpa(q, k, v, is_causal=is_causal)  # the fused CPU kernel: no (L, S) matrix
    return out.reshape(*query.shape[:-1], value.shape[-1])
""",
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("library_calls")
    jobs = {
        item: (build(ex, tmp / item / "sub.ipynb", replace={item: cell}), ex)
        for item, (ex, cell) in CHEATS.items()
    }
    return grade_many(jobs)


@pytest.mark.parametrize("item", sorted(CHEATS))
def test_the_library_call_earns_nothing(item, graded):
    results, _ = graded[item]
    r = results[item]
    assert r.points == 0.0, f"{item} scored with the library's answer: {r.status}: {r.message}"

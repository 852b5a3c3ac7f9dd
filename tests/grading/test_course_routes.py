"""Course code (and, for NumPy ex01, torch) that computed an item's answer while it was on no
forbidden list (attack class 1, "a package function not on the item's list"), found by reading the package as a student after
marks would: an unchecked private twin that a checked public function hands its work to (the
module's fast path), a public function of a later chapter that computes the same thing with one
argument set aside (``capped_attention`` with ``cap=None``, a sliding window wider than the
sequence), a helper that does the item's substantive step. Every cell below scored the item's
full marks before its route was put on the list (but ``rows_to_int8``, written to call the
forbidden ``quantize``: a self-contained copy of it scored full marks), and the rest of the
notebook still grades normally. ``test_forbidden_lists.py`` holds the reviewed lists' own shortcuts."""

from __future__ import annotations

import pytest
from grading_helpers import build, grade_many

# ex02/ex03/ex19: attention and its weights from capped_attention, whose value gets the (S, S)
# identity as extra features (the weights come out beside the output)
CAPPED = """
def _course_attn(q, k, v, mask=None):
    import math, torch
    from mha_course.families.layers import capped_attention
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    L, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q, k, v = (t.expand(*lead, *t.shape[-2:]).reshape(1, -1, *t.shape[-2:]) for t in (q, k, v))
    N = q.shape[1]
    if mask is None:
        mask = torch.ones(L, S, dtype=torch.bool)
    if mask.dtype == torch.bool:
        allowed, bias = mask, torch.zeros(L, S, dtype=q.dtype)
    else:  # an additive mask: -inf blocks, a finite value is a bias on the score
        allowed = ~torch.isinf(mask)
        bias = torch.where(allowed, mask, torch.zeros_like(mask)).to(q.dtype)
    allowed = allowed.expand(*lead, L, S).reshape(1, N, L, S)
    bias = bias.expand(*lead, L, S).reshape(1, N, L, S)
    # the bias folded into the product: [q * scale, e_i] . [k_j, bias[:, j]] = q.k scale + bias
    q2 = torch.cat([q / math.sqrt(D), torch.eye(L, dtype=q.dtype).expand(1, N, L, L)], -1)
    k2 = torch.cat([k, bias.transpose(-2, -1)], -1)
    eye = torch.eye(S, dtype=v.dtype).expand(1, N, S, S)
    out = capped_attention(q2, k2, torch.cat([v, eye], -1), allowed, 1.0, None)
    return out[..., :Dv].reshape(*lead, L, Dv), out[..., Dv:].reshape(*lead, L, S)
"""

# ex04: mha_forward with its heads from _heads, which PRELUDE defines through a course route
MHA_FORWARD_VIA = """
PRELUDE
def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):
    B, T, E = x.shape
    q, k, v = (
        (x @ W).view(B, T, num_heads, E // num_heads).transpose(1, 2).contiguous()
        for W in (W_Q, W_K, W_V)
    )  # (B, T, E) -> (B, H, T, D)
    heads = _heads(q, k, v)  # (B, H, T, D)
    return heads.transpose(1, 2).reshape(B, T, E) @ W_O, heads
"""

# ex01 (NumPy): attend's weights from one torch SDPA call with [V | I] as the values, the name
# reached as a string so that only the runtime tripwire can see it; GET_TORCH is how the cell gets
# hold of torch (a NumPy sandbox does not import torch: the engine wires it on first import)
ATTEND_VIA_TORCH = """
import numpy as np
GET_TORCH
_name = "scaled_dot_" + "product_attention"
def attend(query, keys, values):
    q, k, v = (torch.from_numpy(np.ascontiguousarray(a))[None] for a in (query, keys, values))
    S, Dv = k.shape[-2], v.shape[-1]
    vi = torch.cat([v, torch.eye(S, dtype=v.dtype)[None]], -1)  # (1, S, Dv) -> (1, S, Dv + S)
    out = getattr(torch.nn.functional, _name)(q, k, vi, scale=1.0)[0]
    return out[:, :Dv].numpy(), out[:, Dv:].numpy()
"""
# a learner who takes the engine's import hook off sys.meta_path before importing torch
WITHOUT_HOOK = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if "WireOnImport" not in type(f).__name__]
import torch
KEPT = [getattr(torch.nn.functional, "scaled_dot_" + "product_attention")]  # before any wiring"""

# the private math op, reached through torch's namespace (torch.<op>, not torch.ops.aten.<op>),
# returns the weights itself; named as a string, so that only the runtime tripwire can see it
MATH_OP = 'getattr(torch, "_scaled_dot_product_" + "attention_math")'

# graded alone, so that their sandboxes are NumPy ones (a torch exercise beside them would have
# the child import torch and wire it from the start)
NUMPY_ROUTES = {
    "attend_via_torch_math_op": (
        "ex01",
        "ex01_attend",
        f"""
import numpy as np
import torch
def attend(query, keys, values):
    q, k, v = (torch.from_numpy(np.ascontiguousarray(a))[None] for a in (query, keys, values))
    out, w = {MATH_OP}(q, k, v, scale=1.0)
    return out[0].numpy(), w[0].numpy()
""",
    ),
    "attend_via_torch_sdpa_imported_in_the_call_around_the_hook": (
        "ex01",
        "ex01_attend",
        ATTEND_VIA_TORCH.replace(
            "GET_TORCH",
            'import sys\nsys.meta_path[:] = [f for f in sys.meta_path if "Wire" not in type(f).__name__]',
        ).replace(
            "def attend(query, keys, values):\n",
            "def attend(query, keys, values):\n    import torch\n",
        ),
    ),
    "attend_via_torch_sdpa_one_call": (
        "ex01",
        "ex01_attend",
        ATTEND_VIA_TORCH.replace("GET_TORCH", "import torch"),
    ),
    "attend_via_torch_sdpa_around_the_import_hook": (
        "ex01",
        "ex01_attend",
        ATTEND_VIA_TORCH.replace("GET_TORCH", WITHOUT_HOOK).replace(
            "getattr(torch.nn.functional, _name)", "KEPT[0]"
        ),
    ),
}

ROUTES = {  # case -> (exercise, item, the cell that defines the item's function)
    "split_heads_via__split": (
        "ex04",
        "ex04_split_heads",
        """
def split_heads(x, num_heads):
    from mha_course.attention.heads import _split
    return _split(x, num_heads)
""",
    ),
    "merge_heads_via__merge_reexported": (
        "ex04",
        "ex04_merge_heads",
        """
def merge_heads(x):
    from mha_course.attention.mha import _merge
    return _merge(x)
""",
    ),
    "window_mask_via__visible": (
        "ex14",
        "ex14_window_mask",
        """
def window_mask(L, S, window, num_sink):
    import torch
    from mha_course.caches.window import _visible
    return _visible(torch.arange(S - L, S)[:, None], torch.arange(S)[None, :], window, num_sink)
""",
    ),
    "dq_tile_via__tile_weights": (
        "ex17",
        "ex17_dq_tile",
        """
def dq_tile(q, k, v, d_out, lse, d_term, scale):
    from mha_course.kernels.flash_backward import _tile_weights
    p = _tile_weights(q, k, lse, scale, False, 0, 0)
    return scale * ((p * (d_out @ v.transpose(-2, -1) - d_term.unsqueeze(-1))) @ k)
""",
    ),
    "prune_weights_via__select": (
        "ex10",
        "ex10_prune_weights",
        """
def prune_query_heads(W_Q, b_Q, W_O, num_heads, drop):
    import torch
    from mha_course.analysis.pruning import _select
    D = W_Q.shape[0] // num_heads
    gone = set(drop.tolist())
    keep = torch.tensor([h * D + d for h in range(num_heads) if h not in gone for d in range(D)])
    q_lin = torch.nn.Linear(W_Q.shape[1], W_Q.shape[0], dtype=W_Q.dtype)
    o_lin = torch.nn.Linear(W_O.shape[1], W_O.shape[0], bias=False, dtype=W_O.dtype)
    with torch.no_grad():
        q_lin.weight.copy_(W_Q)
        q_lin.bias.copy_(b_Q)
        o_lin.weight.copy_(W_O)
    q, o = _select(q_lin, keep, 0), _select(o_lin, keep, 1)
    return q.weight.detach(), q.bias.detach(), o.weight.detach()
""",
    ),
    # capped_attention(cap=None): plain attention
    "attention_via_capped_attention": (
        "ex02",
        "ex02_attention",
        CAPPED
        + """
def attention(query, key, value, attn_mask=None):
    return _course_attn(query, key, value, attn_mask)
""",
    ),
    "head_via_capped_attention": (
        "ex03",
        "ex03_head_forward",
        CAPPED
        + """
def self_attention_head(x, W_Q, W_K, W_V):
    return _course_attn(x @ W_Q, x @ W_K, x @ W_V)
""",
    ),
    "gqa_via_capped_attention": (
        "ex07",
        "ex07_gqa_forward",
        """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):
    import math, torch
    from mha_course.families.layers import capped_attention
    B, T, E = x.shape
    H, G, D = num_heads, num_kv_heads, E // num_heads
    q = (x @ W_Q.T).view(B, T, H, D).transpose(1, 2)
    k = (x @ W_K.T).view(B, T, G, D).transpose(1, 2)
    v = (x @ W_V.T).view(B, T, G, D).transpose(1, 2)
    eye = torch.eye(T, dtype=v.dtype).expand(B, G, T, T)
    mask = torch.ones(T, T, dtype=torch.bool)
    out = capped_attention(q, k, torch.cat([v, eye], -1), mask, 1 / math.sqrt(D), None)
    heads, weights = out[..., :D], out[..., D:]
    return heads.transpose(1, 2).reshape(B, T, E) @ W_O.T, weights
""",
    ),
    "ring_step_via_capped_attention": (
        "ex19",
        "ex19_ring_step",
        """
def ring_step(out, lse, query, key, value, q_pos, k_pos, is_causal, scale):
    import torch
    from mha_course.families.layers import capped_attention
    L, S, Dv = query.shape[-2], key.shape[-2], value.shape[-1]
    mask = (k_pos[None, :] <= q_pos[:, None]) if is_causal else torch.ones(L, S, dtype=torch.bool)
    seen = mask.any(-1)
    eye = torch.eye(S, dtype=value.dtype).expand(*value.shape[:2], S, S)
    o = capped_attention(query, key, torch.cat([value, eye], -1), mask | ~seen[:, None], scale, None)
    bo, w = o[..., :Dv], o[..., Dv:]
    j = w.argmax(-1, keepdim=True)  # lse = score_j - log w_j at any key j with weight
    kj = torch.gather(key, -2, j.expand(*j.shape[:-1], key.shape[-1]))
    blse = scale * (query * kj).sum(-1) - torch.log(torch.gather(w, -1, j)[..., 0])
    bo = torch.where(seen[:, None], bo, torch.zeros_like(bo))
    blse = torch.where(seen, blse, torch.full_like(blse, float("-inf")))
    return merge_safe(out, lse, bo, blse)
""",
    ),
    # tiled_attention_fast: chapter 9's tiles with the passes cut
    "packed_mha_via_tiled_attention_fast": (
        "ex04",
        "ex04_fix_packed_mha",
        """
def packed_mha(x, in_proj_weight, out_proj_weight, num_heads):
    from mha_course.kernels.tiled_fast import tiled_attention_fast
    q, k, v = (x @ in_proj_weight.T).chunk(3, dim=-1)
    q, k, v = (split_heads(t, num_heads) for t in (q, k, v))
    heads = tiled_attention_fast(q, k, v)
    return merge_heads(heads) @ out_proj_weight.T, heads
""",
    ),
    "blockwise_via_tiled_attention_fast": (  # under the item's memory bound
        "ex09",
        "ex09_tiled_attention",
        """
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    import math, torch
    from mha_course.kernels.tiled_fast import tiled_attention_fast
    L, S, D, Dv = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    lead, dt = query.shape[:-2], query.dtype
    scale = 1 / math.sqrt(D)
    kw = dict(is_causal=is_causal, scale=scale, block_q=block_q, block_k=block_k)
    # pass 1: the output, and t = the mean score under the weights (within log S of the lse)
    o = tiled_attention_fast(query, key, torch.cat([value, key], -1), **kw)
    out, t = o[..., :Dv], scale * (query * o[..., Dv:]).sum(-1)
    # pass 2: one sentinel key scored t; its weight w0 = 1 / (1 + exp(lse - t))
    qa = torch.cat([query, (t / scale)[..., None]], -1)
    qa = torch.cat([torch.zeros(*lead, 1, D + 1, dtype=dt), qa], -2)  # causal: a dummy query
    sent = torch.zeros(*lead, 1, D + 1, dtype=dt)
    sent[..., -1] = 1
    ka = torch.cat([sent, torch.cat([key, torch.zeros(*lead, S, 1, dtype=dt)], -1)], -2)
    va = torch.zeros(*lead, S + 1, 1, dtype=dt)
    va[..., 0, 0] = 1
    w0 = tiled_attention_fast(qa, ka, va, **kw)[..., 1:, 0]
    return out, t + torch.log1p(-w0) - torch.log(w0)
""",
    ),
    # sliding_window_mask with a window wider than the sequence: a causal mask
    "causal_mask_via_sliding_window_mask": (
        "ex02",
        "ex02_causal_mask",
        """
def make_causal_mask(L, S):
    from mha_course.caches.window import sliding_window_mask
    return sliding_window_mask(L, S, window=L + S + 1)
""",
    ),
    "offset_mask_via_sliding_window_mask": (
        "ex05",
        "ex05_offset_mask",
        """
def offset_causal_mask(L, offset):
    from mha_course.caches.window import sliding_window_mask
    return sliding_window_mask(L, window=L + offset, offset=offset)
""",
    ),
    # kv_cache_elements: kv_cache_bytes without the element size
    "mla_bytes_via_kv_cache_elements": (
        "ex15",
        "ex15_kv_bytes_per_token",
        """
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, latent_dim, rope_dim, dtype):
    import torch
    from mha_course.caches.base import kv_cache_elements
    n = kv_cache_elements(num_layers, num_kv_heads, head_dim, latent_dim=latent_dim, rope_dim=rope_dim)
    return n * torch.empty((), dtype=dtype).element_size()
""",
    ),
    "layout_bytes_via_kv_cache_elements": (
        "ex14",
        "ex14_layout_bytes",
        """
def interleaved_cache_bytes(num_layers, global_every, window, num_sink, num_kv_heads, head_dim, seq_len, batch, dtype):
    import torch
    from mha_course.caches.base import kv_cache_elements
    n_global = num_layers // global_every
    size = torch.empty((), dtype=dtype).element_size()
    total = kv_cache_elements(n_global, num_kv_heads, head_dim, seq_len, batch) if n_global else 0
    if num_layers - n_global:
        kept = min(seq_len, window + num_sink)
        total += kv_cache_elements(num_layers - n_global, num_kv_heads, head_dim, kept, batch)
    return total * size
""",
    ),
    # a later chapter's function with its new argument set aside
    "sinusoidal_via_scaled_frequencies": (
        "ex12",
        "ex12_sinusoidal",
        """
def sinusoidal(num_positions, embed_dim):
    import torch
    from mha_course.families.scaled_rope import scaled_frequencies
    theta, _ = scaled_frequencies(None, embed_dim, 10000.0)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * theta
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)
""",
    ),
    # rows_to_int8: chapter 16's quantize per token, for int8 products beside the lesson (closed
    # by construction: it calls quantize, which the item's staged course holds as a stub)
    "quantize_via_rows_to_int8": (
        "ex16",
        "ex16_quantize",
        """
def quantize_int8(x, axis):
    from mha_course.caches.int8_products import rows_to_int8
    B, G, S, D = x.shape
    if axis == "token":
        q, s = rows_to_int8(x.reshape(B * G, S, D))
        return q.reshape(B, G, S, D), s.reshape(B, G, S, 1)
    q, s = rows_to_int8(x.transpose(-2, -1).reshape(B * G, D, S))
    return q.reshape(B, G, D, S).transpose(-2, -1), s.reshape(B, G, D, 1).transpose(-2, -1)
""",
    ),
    # found by an audit of the package (2026-12-07): tiled_attention_fast's worker, called with
    # the function's own set-up, and chapter 17's Triton forward (a cell naming flop_counter
    # has the sandbox preload it, Triton with it, before the memory cap)
    "mha_forward_via_tiled_fast_query_block": (
        "ex04",
        "ex04_mha_forward",
        MHA_FORWARD_VIA.replace(
            "PRELUDE",
            """
def _heads(q, k, v):
    import math, torch
    from mha_course.kernels.tiled_fast import _query_block, _with_ones
    B, H, T, D = q.shape
    n = B * H
    q_aug = q.new_empty(n, T, D + 1)
    torch.mul(q.reshape(n, T, D), 1 / math.sqrt(D), out=q_aug[..., :D])
    k_t = _with_ones(k.reshape(n, T, D)).transpose(1, 2)
    v_aug = _with_ones(v.reshape(n, T, D))
    bound = torch.linalg.vector_norm(q_aug[..., :D], dim=-1, keepdim=True)
    bound.mul_(torch.linalg.vector_norm(k.reshape(n, T, D), dim=-1).amax(-1).view(n, 1, 1))
    out = q.new_empty(n, T, D)
    _query_block(q_aug, k_t, v_aug, out, bound, 0, False, 1024, q.new_empty(n * T * T), True)
    return out.reshape(B, H, T, D)
""",
        ),
    ),
    "mha_forward_via_triton_forward": (
        "ex04",
        "ex04_mha_forward",
        MHA_FORWARD_VIA.replace(
            "PRELUDE",
            """
import torch.utils.flop_counter  # has the sandbox import Triton before its memory cap
def _heads(q, k, v):
    from mha_course.kernels.triton_flash import triton_forward
    return triton_forward(q, k, v, False, None, 16, 16)[0]
""",
        ),
    ),
    "induction_score_via_previous_token_score": (
        "ex13",
        "ex13_induction_score",
        """
def induction_score(weights, period):
    from mha_course.gpt.heads import previous_token_score
    T = weights.shape[-1]
    return previous_token_score(weights[..., period - 1 :, 1 : T - period + 2])
""",
    ),
    # the (L, S) causal mask from the masks' builder, given every key's position
    "causal_mask_via_build_mask_positions": (
        "ex02",
        "ex02_causal_mask",
        """
def make_causal_mask(L, S):
    import torch
    from mha_course.attention.inputs import build_mask
    m = build_mask(
        None, None, True, (1, 1, L, S), 0, torch.float32, torch.device("cpu"), torch.arange(S)
    )
    return torch.ones(L, S, dtype=torch.bool) if m is None else m[0, 0] if m.dim() == 4 else m
""",
    ),
    "offset_mask_via_build_mask_positions": (
        "ex05",
        "ex05_offset_mask",
        """
def offset_causal_mask(L, offset):
    import torch
    from mha_course.attention.inputs import build_mask
    S = offset + L
    m = build_mask(
        None, None, True, (1, 1, L, S), offset, torch.float32, torch.device("cpu"), torch.arange(S)
    )
    return torch.ones(L, S, dtype=torch.bool) if m is None else m
""",
    ),
    "decode_step_via_build_mask_positions": (
        "ex05",
        "ex05_decode_step",
        """
def decode_step(q_new, k_new, v_new, k_cache, v_cache):
    import torch
    import torch.nn.functional as F
    from mha_course.attention.inputs import build_mask
    k_all, v_all = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
    L, S = q_new.shape[-2], k_all.shape[-2]
    m = build_mask(
        None, None, True, (1, 1, L, S), S - L, q_new.dtype, q_new.device, torch.arange(S)
    )
    return F.scaled_dot_product_attention(q_new, k_all, v_all, attn_mask=m), k_all, v_all
""",
    ),
    "previous_token_head_via_previous_token_score": (
        "ex04",
        "ex04_previous_token_head",
        """
def previous_token_head(weights):
    from mha_course.gpt.heads import previous_token_score
    return int(previous_token_score(weights[None]).argmax())
""",
    ),
}


def _grade(routes: dict, tmp):
    return grade_many(
        {
            case: (build(ex, tmp / case / "sub.ipynb", replace={item: src}), ex)
            for case, (ex, item, src) in routes.items()
        }
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return _grade(ROUTES, tmp_path_factory.mktemp("routes"))


@pytest.fixture(scope="module")
def graded_numpy(tmp_path_factory):
    return _grade(NUMPY_ROUTES, tmp_path_factory.mktemp("numpy_routes"))


@pytest.mark.parametrize("case", list(ROUTES) + list(NUMPY_ROUTES))
def test_a_course_route_to_the_answer_is_forbidden(case, request):
    routes, graded = (ROUTES, "graded") if case in ROUTES else (NUMPY_ROUTES, "graded_numpy")
    _, item, _ = routes[case]
    results, notes = request.getfixturevalue(graded)[case]
    r = results[item]
    assert (r.points, r.status) == (0.0, "forbidden API"), (
        f"{item}: {r.status}: {r.message} {notes}"
    )
    others = [f"{o.id}: {o.status}" for o in results.values() if o.id != item and not o.passed]
    assert not others, others  # the rest of the notebook is graded normally


# Honest torch in a NumPy notebook: torch.softmax is allowed on ex01 (the task's primitive), so a
# cell that imports torch (through the grader's import hook, which wires SDPA then) keeps its marks.
HONEST_TORCH = """
import numpy as np
import torch
def attend(query, keys, values):
    weights = torch.softmax(torch.from_numpy(query @ keys.T), dim=-1).numpy()  # (L, S)
    return weights @ values, weights  # (L, S) @ (S, Dv) -> (L, Dv); and (L, S)
"""
# flex_attention with [V | I] as the values is on no list; in the sandbox its first eager call
# fails once SDPA is wired (torch._dynamo trips over the wired op): pinned, so that a torch
# release that lets it run is seen (it would return the weights for free)
VIA_FLEX = """
import numpy as np
import torch
from torch.nn.attention.flex_attention import flex_attention
def attend(query, keys, values):
    q, k, v = (torch.from_numpy(np.ascontiguousarray(a))[None, None] for a in (query, keys, values))
    S, Dv = k.shape[-2], v.shape[-1]
    vi = torch.cat([v, torch.eye(S, dtype=v.dtype)[None, None]], -1)  # (.., S, Dv) -> (.., S, Dv + S)
    out = flex_attention(q, k, vi, scale=1.0)[0, 0]
    return out[:, :Dv].numpy(), out[:, Dv:].numpy()
"""


def test_torch_in_a_numpy_notebook_honest_keeps_its_marks_flex_does_not_earn_them(tmp_path):
    graded = _grade(
        {
            "honest": ("ex01", "ex01_attend", HONEST_TORCH),
            "flex": ("ex01", "ex01_attend", VIA_FLEX),
        },
        tmp_path,
    )
    honest = graded["honest"][0]
    assert all(r.passed for r in honest.values()), {i: r.status for i, r in honest.items()}
    flex = graded["flex"][0]["ex01_attend"]
    assert flex.points == 0.0, (flex.status, flex.message)


# Two doors still open (tried 2026-12-08 in the real sandbox: full marks on ex01_attend). The
# private math op reached through objects the tripwire cannot rebind, its name built at run time
# so that the source scan cannot see it either: torch._C._VariableFunctions (read-only
# attributes) and the JIT's operator table. Strict xfail: the day a change closes them, this
# fails, and the expectation is flipped (docs/grading.md and the instructor guide say so too).
VIA_VARIABLE_FUNCTIONS = """
import numpy as np
import torch
_op = getattr(torch._C._VariableFunctions, "_scaled_dot_product_" + "attention_math")
def attend(query, keys, values):
    q, k, v = (torch.from_numpy(np.ascontiguousarray(a))[None] for a in (query, keys, values))
    out, w = _op(q, k, v, scale=1.0)
    return out[0].numpy(), w[0].numpy()
"""
VIA_JIT_OPERATION = VIA_VARIABLE_FUNCTIONS.replace(
    'getattr(torch._C._VariableFunctions, "_scaled_dot_product_" + "attention_math")',
    'torch._C._jit_get_operation("aten::_scaled_dot_product_" + "attention_math")[0]',
)


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="open doors: the private op by a built name"
)
def test_the_private_op_by_a_built_name_is_forbidden(tmp_path):
    routes = {
        "variable_functions": ("ex01", "ex01_attend", VIA_VARIABLE_FUNCTIONS),
        "jit_operation": ("ex01", "ex01_attend", VIA_JIT_OPERATION),
    }
    graded = _grade(routes, tmp_path)
    got = {case: graded[case][0]["ex01_attend"] for case in routes}
    assert all(r.points == 0.0 for r in got.values()), {c: r.status for c, r in got.items()}

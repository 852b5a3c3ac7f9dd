"""Chapter 6's graded items: a key padding mask from lengths, cross-attention weights, cross-attention.

References come from ``torch.nn.MultiheadAttention`` itself (same weights, no biases).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from mha_course.attention.heads import merge_heads, split_heads
from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import COURSE_MHA, OTHER_ATTENTION, TILED, TORCH_MHA
from mha_course.ops.masks import padding_mask
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex06_cross_attention"
# SDPA stays allowed: cross_attention's solution builds on it (and the static check is per notebook,
# so it can't be forbidden for the weights item alone, though SDPA with value = I gives the weights)
_FORBID_MHA = (*TORCH_MHA, COURSE_MHA, *TILED, *OTHER_ATTENTION)

PAD_ONE_AXIS = (
    "the (B, S) padding mask got one new axis, (B, 1, S): against the (B, H, L, S) scores it "
    "broadcasts as (1, B, 1, S), so sequence b's padding lands on head b of every sequence"
)
PAD_INVERTED = (
    "a key padding mask's True marks PADDING (keys to ignore) — the opposite of "
    "attn_mask's True = may attend"
)
PAD_IGNORED = "padded memory positions get attention weight"
NOT_MERGED = (
    "heads not merged: the output keeps the head axis (B, H, L, D) and has no output projection"
)
TRANSPOSED = "(B, H, L, S) has one row per query (L), one column per memory position (S)"
AVERAGED = "heads averaged: the head axis of the per-head weights (B, H, L, S) is gone"
NO_OUT_PROJ = "output projection W_O missing: the output is the merged heads themselves"


# ---- task 1: padding mask from lengths ---------------------------------------------------------
def _pad_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"lengths": rng.integers(1, 6, size=3), "S": 7},
        {"lengths": np.array([4, int(rng.integers(1, 4))]), "S": 4},
        {"lengths": np.array([0, 2, 5]), "S": 6},
        _wide_pad_case(rng),  # rarely shared by two students
    ]


def _wide_pad_case(rng: np.random.Generator) -> dict:
    S = int(rng.integers(8, 41))
    return {"lengths": rng.integers(1, S, size=int(rng.integers(3, 7))), "S": S}


def _s_ignored(got: np.ndarray, case: dict) -> bool:
    widest = int(case["lengths"].max())
    return got.ndim == 2 and got.shape[1] == widest != case["S"]


# ---- tasks 2 and 3: cross-attention -----------------------------------------------------------
def _f(rng: np.random.Generator, dtype, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.normal(size=shape)).astype(dtype)


def _pads(B: int, S: int, rng: np.random.Generator, distinct: bool = False) -> np.ndarray:
    # every sequence: at least one real and one padded key; ``distinct``: no two alike, so a mask
    # broadcast over the wrong axis (batch b's padding on head b) cannot coincide
    lengths = rng.permutation(np.arange(1, S))[:B] if distinct else rng.integers(1, S, size=B)
    return np.arange(S)[None, :] >= lengths[:, None]  # (B, S), True = padding


def _case(rng, B, L, S, E, M_, H, dtype, padded, with_value=True, distinct=False):
    case = {
        "query": _f(rng, dtype, B, L, E),
        "memory": _f(rng, dtype, B, S, M_),
        "W_Q": _f(rng, dtype, E, E, scale=E**-0.5),
        "W_K": _f(rng, dtype, E, M_, scale=M_**-0.5),
    }
    if with_value:
        case.update(
            {
                "W_V": _f(rng, dtype, E, M_, scale=M_**-0.5),
                "W_O": _f(rng, dtype, E, E, scale=E**-0.5),
            }
        )
    pads = _pads(B, S, rng, distinct) if padded else None
    case.update({"num_heads": H, "key_padding_mask": pads})
    return case


def _cross_cases(with_value: bool):
    def make(rng: np.random.Generator) -> list[dict]:
        return [
            _case(rng, 2, 2, 3, 8, 8, 4, np.float64, False, with_value),  # kdim = E, no padding
            _case(rng, 2, 3, 5, 8, 6, 2, np.float32, True, with_value),  # L != S, kdim != E
            _case(rng, 1, 4, 6, 12, 12, 3, np.float64, True, with_value),
            # B == H > 1 with every length different: key_padding_mask[:, None, :] (one axis
            # short) puts batch b's padding on head b, which the cases above could hide
            _case(rng, 3, 2, 5, 12, 12, 3, np.float64, True, with_value, distinct=True),
        ]

    return make


def _torch_mha(query, W_Q, W_K, W_V, W_O, H) -> nn.MultiheadAttention:
    E, kdim = W_Q.shape[0], W_K.shape[1]
    m = nn.MultiheadAttention(
        E, H, bias=False, kdim=kdim, vdim=kdim, batch_first=True, dtype=query.dtype
    )
    with torch.no_grad():
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([W_Q, W_K, W_V]))  # 3 x (E, E) -> (3E, E)
        else:
            m.q_proj_weight.copy_(W_Q)
            m.k_proj_weight.copy_(W_K)
            m.v_proj_weight.copy_(W_V)
        m.out_proj.weight.copy_(W_O)
    return m.eval()


def _ref_weights(query, memory, W_Q, W_K, H, kpm):
    """nn.MultiheadAttention's per-head weights, and the scores before the softmax, which it never
    returns (issue 19, item 9): scaled, -inf at padded keys."""
    W_V = torch.zeros_like(W_K)
    m = _torch_mha(query, W_Q, W_K, W_V, torch.eye(W_Q.shape[0], dtype=query.dtype), H)
    scores = _attend(query, memory, W_Q, W_K, None, H, kpm)[2]  # (B, H, L, S)
    with torch.no_grad():
        return m(
            query,
            memory,
            memory,
            key_padding_mask=kpm,
            need_weights=True,
            average_attn_weights=False,
        )[1], scores  # (B, H, L, S) each


def _ref_output(query, memory, W_Q, W_K, W_V, W_O, H, kpm):
    """nn.MultiheadAttention's output, and the per-head outputs before the merge, which it never
    returns (issue 19, item 9)."""
    m = _torch_mha(query, W_Q, W_K, W_V, W_O, H)
    heads = _attend(query, memory, W_Q, W_K, W_V, H, kpm)[0]  # (B, H, L, D)
    with torch.no_grad():
        return m(query, memory, memory, key_padding_mask=kpm, need_weights=False)[
            0
        ], heads  # (B, L, E), (B, H, L, D)


def _attend(query, memory, W_Q, W_K, W_V, H, kpm, *, pad="ok", split=split_heads, **kw):
    """Per-head attention with one chosen mistake (``pad``: ok, inverted, ignored, after_softmax,
    one_axis_short):
    ``(output, weights, scores)`` (with ``W_V=None`` the output is the weights)."""
    q = split(query @ W_Q.T, H)  # (B, L, E) -> (B, H, L, D)
    k = split(memory @ W_K.T, H)  # (B, S, kdim) -> (B, H, S, D)
    v = (
        split(memory @ W_V.T, H) if W_V is not None else torch.eye(k.shape[-2], dtype=k.dtype)
    )  # eye: weights
    mask = (
        None if kpm is None or pad == "ignored" else ~kpm[:, None, None, :]
    )  # (B, S) -> (B, 1, 1, S)
    if kpm is not None and pad == "one_axis_short":
        mask = ~kpm[:, None, :]  # (B, S) -> (B, 1, S): broadcast as (1, B, 1, S), batch on heads
    mode = "ok" if pad in ("ignored", "one_axis_short") else pad
    return M.attention_variant(
        q, k, v, mask, mask_mode=mode, embed_dim=W_Q.shape[0], return_scores=True, **kw
    )


def _weights_variant(**kw):
    def run(query, memory, W_Q, W_K, H, kpm):
        return _attend(query, memory, W_Q, W_K, None, H, kpm, **kw)[
            1:
        ]  # weights, scores: (B, H, L, S)

    return run


def _output_variant(no_out=False, no_merge=False, **kw):
    def run(query, memory, W_Q, W_K, W_V, W_O, H, kpm):
        heads = _attend(query, memory, W_Q, W_K, W_V, H, kpm, **kw)[0]  # (B, H, L, D)
        if no_merge:
            return heads, heads
        merged = merge_heads(heads)  # (B, H, L, D) -> (B, L, E)
        return (merged if no_out else merged @ W_O.T), heads

    return run


def _common(variant) -> tuple[Mistake, ...]:
    return (
        Mistake("padding mask inverted", PAD_INVERTED, variant=variant(pad="inverted")),
        Mistake("padding mask ignored", PAD_IGNORED, variant=variant(pad="ignored")),
        Mistake("padding mask one axis short", PAD_ONE_AXIS, variant=variant(pad="one_axis_short")),
        Mistake("mask after softmax", M.MASK_AFTER_SOFTMAX, variant=variant(pad="after_softmax")),
        Mistake("scaled by sqrt(E)", M.SCALE_BY_E, variant=variant(scale="sqrt_e")),
        Mistake("no scaling", M.NO_SCALE, variant=variant(scale="none")),
        Mistake("wrong axis", M.WRONG_AXIS, variant=variant(softmax_dim=-2)),
        Mistake(
            "split with view", M.SPLIT_WITH_VIEW, variant=variant(split=M.split_heads_with_view)
        ),
    )


def _transposed(query, memory, W_Q, W_K, H, kpm):
    return tuple(
        t.transpose(-2, -1) for t in _ref_weights(query, memory, W_Q, W_K, H, kpm)
    )  # (B, H, S, L)


def _averaged(query, memory, W_Q, W_K, H, kpm):
    return tuple(
        t.mean(dim=1) for t in _ref_weights(query, memory, W_Q, W_K, H, kpm)
    )  # (B, H, L, S) -> (B, L, S)


ITEMS = [
    Item(
        id="ex06_padding_mask",
        notebook=NOTEBOOK,
        function="padding_mask_from_lengths",
        points=1,
        task="bool (B, S) key padding mask: True where position j >= the sequence's length",
        make_cases=_pad_cases,
        shape="(B, S)",
        reference=lambda lengths, S: padding_mask(lengths, S),
        mistakes=(
            Mistake("inverted", PAD_INVERTED, variant=lambda lengths, S: ~padding_mask(lengths, S)),
            Mistake(
                "off by one",
                "off by one: position j is padding when j >= length (a length-3 "
                "sequence has real tokens at 0, 1, 2)",
                variant=lambda lengths, S: padding_mask(lengths - 1, S),
            ),
            Mistake(
                "off by one",
                "off by one: position j is padding when j >= length (a length-3 "
                "sequence has real tokens at 0, 1, 2)",
                variant=lambda lengths, S: padding_mask(lengths + 1, S),
            ),
            Mistake(
                "S ignored",
                "the mask must have S columns (the padded length), not max(lengths)",
                matches=_s_ignored,
            ),
        ),
        forbidden=("mha_course.ops.masks.padding_mask",),
    ),
    Item(
        id="ex06_cross_weights",
        notebook=NOTEBOOK,
        function="cross_attention_weights",
        points=2,
        task="per-head weights softmax(Q Kᵀ / sqrt(D)) with Q from query, K from memory, padded keys masked; "
        "returns (weights, the scores before the softmax)",
        make_cases=_cross_cases(with_value=False),
        shape="(B, H, L, S), (B, H, L, S)",
        reference=_ref_weights,
        mistakes=_common(_weights_variant)
        + (
            Mistake("transposed", TRANSPOSED, variant=_transposed),
            Mistake("heads averaged", AVERAGED, variant=_averaged),
        ),
        forbidden=_FORBID_MHA,
    ),
    Item(
        id="ex06_cross_attention",
        notebook=NOTEBOOK,
        function="cross_attention",
        points=2,
        task="multi-head cross-attention: queries from query (L), keys/values from memory (S), key padding; "
        "returns (output, the per-head outputs before the merge)",
        make_cases=_cross_cases(with_value=True),
        shape="(B, L, E), (B, H, L, D)",
        reference=_ref_output,
        mistakes=_common(_output_variant)
        + (
            Mistake("heads not merged", NOT_MERGED, variant=_output_variant(no_merge=True)),
            Mistake("W_O missing", NO_OUT_PROJ, variant=_output_variant(no_out=True)),
        ),
        forbidden=_FORBID_MHA,
    ),
]


# ---- debug: a key padding mask passed where SDPA wants True = may attend ----------------------


def _padded_sdpa_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, H, L, S, D, dtype):
        return {
            "q": _f(rng, dtype, B, H, L, D),
            "k": _f(rng, dtype, B, H, S, D),
            "v": _f(rng, dtype, B, H, S, D),
            "key_padding_mask": _pads(B, S, rng),
        }

    return [
        case(2, 2, 3, 5, 4, np.float32),
        case(3, 1, 4, 4, 8, np.float64),
        case(1, 3, 2, 7, 4, np.float32),
    ]


def _padded_sdpa(q, k, v, kpm, pad="ok"):
    mask = ~kpm[:, None, None, :]  # (B, S) -> (B, 1, 1, S), True = may attend
    return M.attention_variant(q, k, v, mask, mask_mode="inverted" if pad == "inverted" else "ok")


# ---- interpret: read each sequence's length off its attention weights -------------------------
def _lengths_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for B, H, L, S in ((2, 2, 3, 6), (3, 4, 2, int(rng.integers(8, 15))), (4, 1, 5, 9)):
        lengths = rng.integers(1, S + 1, size=B)
        q, k = rng.normal(size=(B, H, L, 4)), rng.normal(size=(B, H, S, 4))
        scores = np.where(
            np.arange(S) < lengths[:, None, None, None], q @ k.swapaxes(-1, -2), -np.inf
        )
        w = np.exp(scores - scores.max(-1, keepdims=True))
        cases.append({"weights": w / w.sum(-1, keepdims=True)})  # (B, H, L, S)
    return cases


def _lengths(weights):
    return (weights > 0).any(dim=-2).any(dim=-2).sum(dim=-1)  # (B, H, L, S) -> (B, S) -> (B,)


ITEMS += [
    Item(
        id="ex06_fix_padded_sdpa",
        notebook=NOTEBOOK,
        function="padded_attention",
        points=1,
        task="debug: padded_attention_buggy corrected (padded keys get no weight)",
        make_cases=_padded_sdpa_cases,
        shape="(B, H, L, D)",
        reference=_padded_sdpa,
        mistakes=(
            Mistake(
                "padding mask inverted (the given bug)",
                PAD_INVERTED,
                variant=lambda q, k, v, kpm: _padded_sdpa(q, k, v, kpm, pad="inverted"),
            ),
            Mistake(
                "padding ignored",
                PAD_IGNORED,
                variant=lambda q, k, v, kpm: M.attention_variant(q, k, v, None),
            ),
        ),
        forbidden=_FORBID_MHA,
    ),
    Item(
        id="ex06_lengths_from_weights",
        notebook=NOTEBOOK,
        function="lengths_from_weights",
        points=1,
        task="interpret: each sequence's length (its real memory positions) from padded attention weights",
        make_cases=_lengths_cases,
        shape="(B,)",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        reference=_lengths,
        mistakes=(
            Mistake(
                "counted padding",
                "counted the padded (zero-weight) positions: the length is the "
                "number of positions that get weight",
                variant=lambda w: w.shape[-1] - _lengths(w),
            ),
            Mistake(
                "last index",
                "that is the index of the last real position; the length is one more",
                variant=lambda w: _lengths(w) - 1,
            ),
        ),
        forbidden=("mha_course.ops.masks.padding_mask",),
    ),
]

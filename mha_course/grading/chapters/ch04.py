"""Chapter 4's graded items: split/merge heads, the MHA forward from given weights, its parameters."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.attention.heads import merge_heads, split_heads
from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import ATTENTION, COURSE_MHA, NUMPY_ATTENTION, TORCH_MHA
from mha_course.ops.sdpa import scaled_dot_product_attention
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex04_multi_head_attention"
# graded alone when an earlier task fails: the course\'s own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes."
_SDPA_FORBID = ATTENTION + NUMPY_ATTENTION

MERGE_WITH_VIEW = (
    "heads merged with view/reshape only: the shape is (B, T, E) but each token's "
    "row mixes several tokens' features"
)
MERGE_INTERLEAVED = (
    "features interleaved: each token's row holds the heads' features in the "
    "order (D, H), so one head's D features are not side by side"
)
WEIGHTS_TRANSPOSED = (
    "weights used transposed: here every W is (E_in, E_out) and a projection is "
    "x @ W (nn.Linear stores weight as (out, in) and computes x @ weight.T)"
)
PARAMS_DEPEND_ON_H = (
    "the count does not depend on H: W_Q, W_K, W_V, W_O are E x E whatever the "
    "number of heads (4·E² + 4·E with bias)"
)
PARAMS_NO_W_O = "W_O forgotten: multi-head attention has four E x E matrices (and four biases)"
PARAMS_NO_BIAS = "bias forgotten: with bias=True each of the four projections has E biases (+4·E)"


def _f(rng: np.random.Generator, dtype, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(dtype)


# ---- split / merge ----------------------------------------------------------------------------
def _split_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"x": _f(rng, np.float32, 2, 5, 12), "num_heads": 3},
        {"x": _f(rng, np.float64, 1, 4, 8), "num_heads": 2},
        {"x": _f(rng, np.float32, 3, 2, 6), "num_heads": 6},
    ]


def _merge_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"x": _f(rng, np.float32, 2, 3, 5, 4)},
        {"x": _f(rng, np.float64, 1, 2, 4, 3)},
        {"x": _f(rng, np.float32, 3, 4, 2, 2)},
    ]


def _merge_view(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H*D) without the transpose: scrambled


def _merge_interleaved(x):
    B, H, T, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, D, H) -> (B, T, D*H)


# ---- the forward ------------------------------------------------------------------------------
def _forward_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, T, E, H, dtype):
        W = {
            n: (rng.normal(size=(E, E)) / math.sqrt(E)).astype(dtype)
            for n in ("W_Q", "W_K", "W_V", "W_O")
        }
        return {"x": _f(rng, dtype, B, T, E), **W, "num_heads": H}

    return [
        case(2, 5, 12, 3, np.float32),
        case(1, 4, 8, 2, np.float64),
        case(2, 3, 16, 4, np.float32),
    ]


def _forward_variant(
    split=split_heads,
    merge=merge_heads,
    scale="sqrt_d",
    softmax_dim=-1,
    out_proj=True,
    transposed=False,
):
    """What an MHA forward with one mistake returns."""

    def run(x, W_Q, W_K, W_V, W_O, H):
        Ws = [W.T if transposed else W for W in (W_Q, W_K, W_V, W_O)]
        q, k, v = (split(x @ W, H) for W in Ws[:3])  # (B, T, E) -> (B, H, T, D)
        heads = M.attention_variant(
            q, k, v, None, scale=scale, embed_dim=x.shape[-1], softmax_dim=softmax_dim
        )  # (B, H, T, D)
        out = merge(heads)  # (B, H, T, D) -> (B, T, E)
        return (out @ Ws[3] if out_proj else out), heads

    return run


def _forward(x, W_Q, W_K, W_V, W_O, H):
    """The output and the per-head outputs before the merge: nn.MultiheadAttention returns the
    output (and the weights), never the heads (issue 19, item 9)."""
    q, k, v = (split_heads(x @ W, H) for W in (W_Q, W_K, W_V))  # (B, T, E) -> (B, H, T, D)
    heads = scaled_dot_product_attention(q, k, v)  # (B, H, T, D)
    return merge_heads(heads) @ W_O, heads  # (B, H, T, D) -> (B, T, E); and (B, H, T, D)


def _count_cases(rng: np.random.Generator) -> list[dict]:
    E = int(rng.integers(2, 129)) * 32  # wide ranges: students' counts rarely coincide
    H = int(rng.integers(2, 17))
    return [
        {"E": E, "num_heads": 8, "bias": True},
        {"E": 64, "num_heads": 4, "bias": False},
        {"E": H * int(rng.integers(2, 65)), "num_heads": H, "bias": True},
    ]


# Task 1's unit: split_heads and its unchecked twin ``_split`` (what MultiHeadAttention calls);
# the previous-token item shares it and adds chapter 13's score of that head
SPLIT_FORBID = (
    "mha_course.attention.heads.split_heads",
    "mha_course.attention.heads._split",
    "mha_course.gpt.heads.previous_token_score",
)

ITEMS = [
    Item(
        id="ex04_split_heads",
        notebook=NOTEBOOK,
        function="split_heads",
        points=1,
        task="(B, T, E) -> (B, T, H, D) -> (B, H, T, D)",
        make_cases=_split_cases,
        shape="(B, H, T, D)",
        reference=split_heads,
        mistakes=(Mistake("split with view", M.SPLIT_WITH_VIEW, variant=M.split_heads_with_view),),
        forbidden=SPLIT_FORBID,
    ),
    Item(
        id="ex04_merge_heads",
        notebook=NOTEBOOK,
        function="merge_heads",
        points=1,
        task="(B, H, T, D) -> (B, T, H, D) -> (B, T, E)",
        make_cases=_merge_cases,
        shape="(B, T, E)",
        reference=merge_heads,
        mistakes=(
            Mistake("merge with view", MERGE_WITH_VIEW, variant=_merge_view),
            Mistake("interleaved", MERGE_INTERLEAVED, variant=_merge_interleaved),
        ),
        forbidden=(
            "mha_course.attention.heads.merge_heads",
            "mha_course.attention.heads._merge",  # its unchecked twin (MultiHeadAttention's)
        ),
    ),
    Item(
        id="ex04_mha_forward",
        uses=("split_heads", "merge_heads"),
        substitutes=(("split_heads", _SUB + "split_heads"), ("merge_heads", _SUB + "merge_heads")),
        notebook=NOTEBOOK,
        function="mha_forward",
        points=3,
        task="split heads of x W_Q, x W_K, x W_V; attend per head (1/sqrt(D)); merge; multiply by W_O; "
        "return (output, the per-head outputs before the merge)",
        make_cases=_forward_cases,
        shape="(B, T, E), (B, H, T, D)",
        reference=_forward,
        mistakes=(
            Mistake(
                "split with view",
                M.SPLIT_WITH_VIEW,
                variant=_forward_variant(split=M.split_heads_with_view),
            ),
            Mistake(
                "split with view",
                M.SPLIT_WITH_VIEW,
                variant=_forward_variant(split=M.split_heads_with_view, merge=_merge_view),
            ),
            Mistake(
                "merge with view", MERGE_WITH_VIEW, variant=_forward_variant(merge=_merge_view)
            ),
            Mistake("scaled by 1/sqrt(E)", M.SCALE_BY_E, variant=_forward_variant(scale="sqrt_e")),
            Mistake("no scaling", M.NO_SCALE, variant=_forward_variant(scale="none")),
            Mistake("wrong axis", M.WRONG_AXIS, variant=_forward_variant(softmax_dim=-2)),
            Mistake("no W_O", M.NO_W_O, variant=_forward_variant(out_proj=False)),
            Mistake(
                "transposed weights", WEIGHTS_TRANSPOSED, variant=_forward_variant(transposed=True)
            ),
        ),
        forbidden=_SDPA_FORBID,
    ),
    Item(
        id="ex04_mha_params",
        notebook=NOTEBOOK,
        function="mha_param_count",
        points=1,
        task="parameters of multi-head attention: 4·E², plus 4·E with bias",
        make_cases=_count_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,  # a count: exact
        reference=lambda E, H, bias: 4 * E * E + (4 * E if bias else 0),
        mistakes=(
            Mistake(
                "depends on H",
                PARAMS_DEPEND_ON_H,
                variant=lambda E, H, bias: 4 * E * (E // H) + (4 * (E // H) if bias else 0),
            ),
            Mistake(
                "depends on H",
                PARAMS_DEPEND_ON_H,
                variant=lambda E, H, bias: H * (4 * E * E + (4 * E if bias else 0)),
            ),
            Mistake(
                "W_O forgotten",
                PARAMS_NO_W_O,
                variant=lambda E, H, bias: 3 * E * E + (3 * E if bias else 0),
            ),
            Mistake("bias forgotten", PARAMS_NO_BIAS, variant=lambda E, H, bias: 4 * E * E),
        ),
        forbidden=(COURSE_MHA, *TORCH_MHA),  # build one and count its parameters: no work
    ),
]


# ---- debug: nn.MultiheadAttention's packed weights, heads merged in the wrong order ------------
def _packed_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, T, E, H, dtype):
        return {
            "x": _f(rng, dtype, B, T, E),
            "in_proj_weight": (rng.normal(size=(3 * E, E)) / math.sqrt(E)).astype(dtype),
            "out_proj_weight": (rng.normal(size=(E, E)) / math.sqrt(E)).astype(dtype),
            "num_heads": H,
        }

    return [
        case(2, 5, 12, 3, np.float32),
        case(1, 4, 8, 2, np.float64),
        case(2, 3, 16, 4, np.float32),
    ]


def _torch_packed(x, in_proj_weight, out_proj_weight, num_heads):
    """nn.MultiheadAttention's output, and the per-head outputs it never returns (issue 19, item 9)."""
    E = x.shape[-1]
    mha = torch.nn.MultiheadAttention(E, num_heads, bias=False, batch_first=True, dtype=x.dtype)
    q, k, v = (
        split_heads(x @ W.T, num_heads) for W in in_proj_weight.chunk(3)
    )  # (B, T, E) -> (B, H, T, D)
    with torch.no_grad():
        mha.in_proj_weight.copy_(in_proj_weight)
        mha.out_proj.weight.copy_(out_proj_weight)
        return mha(x, x, x, need_weights=False)[0], scaled_dot_product_attention(
            q, k, v
        )  # (B, T, E), (B, H, T, D)


def _packed_variant(merge=_merge_interleaved, scale="sqrt_d"):
    def run(x, in_proj_weight, out_proj_weight, num_heads):
        W_Q, W_K, W_V = (W.T for W in in_proj_weight.chunk(3))  # (3E, E) -> 3 x (E, E), as x @ W
        return _forward_variant(merge=merge, scale=scale)(
            x, W_Q, W_K, W_V, out_proj_weight.T, num_heads
        )

    return run


# ---- interpret: which head attends to the previous token? -------------------------------------
HEAD_ROLES = ("previous", "self", "first", "uniform", "two back")
PICKED_SELF = (
    "picked the head that attends to the token ITSELF (the diagonal, weights[h, i, i]); "
    "the previous token is one below the diagonal, weights[h, i, i - 1]"
)
PICKED_TWO_BACK = "off by one: that head looks two tokens back (weights[h, i, i - 2])"
PICKED_ABOVE = (
    "read above the diagonal: under the causal mask weights[h, i, i + 1] is always 0; "
    "the previous token of query i is key i - 1"
)


def _heads_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for _ in range(3):
        T, H = int(rng.integers(6, 13)), int(rng.integers(4, 7))
        roles = ["previous", "self", "two back"] + [
            HEAD_ROLES[int(r)] for r in rng.integers(1, len(HEAD_ROLES), size=H - 3)
        ]
        roles = [roles[r] for r in rng.permutation(H)]  # one previous-token head, somewhere
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        target = {
            "previous": np.maximum(i - 1, 0),
            "self": i,
            "first": 0 * i,
            "two back": np.maximum(i - 2, 0),
        }
        logits = rng.normal(size=(H, T, T)) * 0.7  # noise: no head is a perfect pattern
        for h, role in enumerate(roles):
            if role != "uniform":
                logits[h] += 4.0 * (j == target[role])
        logits = np.where(j <= i, logits, -np.inf)  # causal
        w = np.exp(logits - logits.max(-1, keepdims=True))
        cases.append({"weights": (w / w.sum(-1, keepdims=True)).astype(np.float32)})
    return cases


def _offset_head(weights, offset):
    """The head with the largest mean weight on key i + offset (over the queries that have one)."""
    T = weights.shape[-1]
    rows = torch.arange(max(0, -offset), min(T, T - offset))
    return int(weights[:, rows, rows + offset].mean(-1).argmax())


ITEMS += [
    Item(
        id="ex04_fix_packed_mha",
        notebook=NOTEBOOK,
        function="packed_mha",
        points=2,
        task="debug: packed_mha_buggy corrected (equal to nn.MultiheadAttention without biases), "
        "returning (output, the per-head outputs)",
        make_cases=_packed_cases,
        shape="(B, T, E), (B, H, T, D)",
        reference=_torch_packed,
        mistakes=(
            Mistake("interleaved (the given bug)", MERGE_INTERLEAVED, variant=_packed_variant()),
            Mistake("merge with view", MERGE_WITH_VIEW, variant=_packed_variant(merge=_merge_view)),
            Mistake(
                "scaled by 1/sqrt(E)",
                M.SCALE_BY_E,
                variant=_packed_variant(merge=merge_heads, scale="sqrt_e"),
            ),
            Mistake(
                "weights not transposed",
                WEIGHTS_TRANSPOSED,
                variant=lambda x, w_in, w_out, H: _packed_variant(merge=merge_heads)(
                    x, torch.cat([W.T for W in w_in.chunk(3)]), w_out.T, H
                ),
            ),
        ),
        forbidden=_SDPA_FORBID,
    ),
    Item(
        id="ex04_previous_token_head",
        notebook=NOTEBOOK,
        function="previous_token_head",
        points=1,
        task="interpret: the index of the head that attends to the previous token, from causal weights",
        make_cases=_heads_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        reference=lambda w: _offset_head(w, -1),
        mistakes=(
            Mistake("picked the diagonal", PICKED_SELF, variant=lambda w: _offset_head(w, 0)),
            Mistake("two back", PICKED_TWO_BACK, variant=lambda w: _offset_head(w, -2)),
        ),
        forbidden=SPLIT_FORBID,  # nothing computes it: task 1's set, task 1's unit
    ),
]

"""Chapter 3's graded items: project Q/K/V, one self-attention head, a head's parameter count."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import ATTENTION, NUMPY_ATTENTION
from mha_course.ops.sdpa import scaled_dot_product_attention
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex03_self_attention"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes."
_SDPA_FORBID = ATTENTION + NUMPY_ATTENTION

PARAMS_NO_BIAS = "bias forgotten: with bias=True each of W_Q, W_K, W_V also has D biases (+3·D)"
PARAMS_WITH_W_O = "counted four matrices: a single head has W_Q, W_K, W_V only (3·E·D), no W_O"
PARAMS_BIAS_E = (
    "bias counted with E entries: a bias has one entry per OUTPUT feature, D per projection"
)


def _weights(rng: np.random.Generator, E: int, D: int, dtype) -> np.ndarray:
    """Projection weights with unit-variance outputs, so scores stay moderate (scaling matters)."""
    return (rng.normal(size=(E, D)) / math.sqrt(E)).astype(dtype)


def _head_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, T, E, D, dtype):
        return {
            "x": rng.normal(size=(B, T, E)).astype(dtype),
            "W_Q": _weights(rng, E, D, dtype),
            "W_K": _weights(rng, E, D, dtype),
            "W_V": _weights(rng, E, D, dtype),
        }

    return [
        case(2, 5, 12, 3, np.float32),
        case(1, 6, 16, 8, np.float64),
        case(3, 4, 10, 5, np.float32),
    ]


def _project(x, W_Q, W_K, W_V):
    return x @ W_Q, x @ W_K, x @ W_V  # (B, T, E) @ (E, D) -> (B, T, D) each


def _head(x, W_Q, W_K, W_V):
    # the weights too: SDPA on the projections returns the output only (issue 19, item 9)
    return scaled_dot_product_attention(
        *_project(x, W_Q, W_K, W_V), return_weights=True
    )  # (B, T, D), (B, T, T)


def _head_variant(**kw):
    return lambda x, W_Q, W_K, W_V: M.attention_variant(
        *_project(x, W_Q, W_K, W_V), None, embed_dim=x.shape[-1], return_weights=True, **kw
    )


def _count_cases(rng: np.random.Generator) -> list[dict]:
    E = int(rng.integers(3, 65)) * 16  # wide ranges: students' counts rarely coincide
    E2 = int(rng.integers(8, 1025))
    return [
        {"E": E, "D": E // 4, "bias": True},
        {"E": 64, "D": 16, "bias": False},
        {"E": E2, "D": int(rng.integers(2, E2)), "bias": True},
    ]


ITEMS = [
    Item(
        id="ex03_project_qkv",
        notebook=NOTEBOOK,
        function="project_qkv",
        points=1,
        task="q, k, v = x @ W_Q, x @ W_K, x @ W_V",
        make_cases=_head_cases,
        shape="(B, T, D)",
        reference=_project,
    ),
    Item(
        id="ex03_head_forward",
        # the solution projects inline; a learner's head that calls task 1 is graded alone too
        substitutes=(("project_qkv", _SUB + "project_qkv"),),
        notebook=NOTEBOOK,
        function="self_attention_head",
        points=2,
        task="(softmax((x W_Q)(x W_K)ᵀ / sqrt(D)) (x W_V), the weights)",
        make_cases=_head_cases,
        shape="(B, T, D), (B, T, T)",
        reference=_head,
        mistakes=(
            Mistake("no scaling", M.NO_SCALE, variant=_head_variant(scale="none")),
            Mistake("scaled by 1/sqrt(E)", M.SCALE_BY_E, variant=_head_variant(scale="sqrt_e")),
            Mistake("scaled by 1/D", M.SCALE_BY_D, variant=_head_variant(scale="d")),
            Mistake("wrong axis", M.WRONG_AXIS, variant=_head_variant(softmax_dim=-2)),
        ),
        forbidden=_SDPA_FORBID,
    ),
    Item(
        id="ex03_head_params",
        notebook=NOTEBOOK,
        function="head_param_count",
        points=1,
        task="parameters of one head: 3·E·D, plus 3·D with bias",
        make_cases=_count_cases,
        shape="()",
        reference=lambda E, D, bias: 3 * E * D + (3 * D if bias else 0),
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,  # a count: exact
        mistakes=(
            Mistake("bias forgotten", PARAMS_NO_BIAS, variant=lambda E, D, bias: 3 * E * D),
            Mistake(
                "W_O counted",
                PARAMS_WITH_W_O,
                variant=lambda E, D, bias: 4 * E * D + (4 * D if bias else 0),
            ),
            Mistake(
                "W_O counted",
                PARAMS_WITH_W_O,
                variant=lambda E, D, bias: 4 * E * D + (3 * D + E if bias else 0),
            ),
            Mistake(
                "bias of size E",
                PARAMS_BIAS_E,
                variant=lambda E, D, bias: 3 * E * D + (3 * E if bias else 0),
            ),
        ),
        forbidden=(
            "mha_course.attention.single_head.SelfAttentionHead",
        ),  # build one and count: no work
    ),
]


# ---- interpret: which head's scores come from one shared projection (W_Q = W_K)? --------------
PICKED_SELF_CENTRED = (
    "picked the head with the strongest diagonal: a head can favour each token itself "
    "without W_Q = W_K; what a shared projection guarantees is symmetric scores, "
    "score(i, j) = score(j, i)"
)


def _symmetric_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for _ in range(3):
        T, E, D, K = int(rng.integers(5, 10)), 8, 4, int(rng.integers(4, 6))
        x = rng.normal(size=(T, E))
        heads = [
            (_weights(rng, E, D, np.float64), _weights(rng, E, D, np.float64)) for _ in range(K)
        ]
        shared, decoy = rng.choice(K, size=2, replace=False)
        heads[shared] = (heads[shared][0], heads[shared][0])  # W_K = W_Q: symmetric scores
        scores = [(x @ W_Q) @ (x @ W_K).T / math.sqrt(D) for W_Q, W_K in heads]  # (T, T) each
        skew = rng.normal(size=(T, T))
        scores[decoy] = (
            scores[decoy] + 3.0 * np.eye(T) + 0.5 * (skew - skew.T)
        )  # self-centred, not symmetric
        cases.append({"scores": np.stack(scores)})  # (K, T, T)
    return cases


def _asymmetry(scores):
    return (scores - scores.transpose(-2, -1)).norm(dim=(-2, -1)) / scores.norm(
        dim=(-2, -1)
    )  # (K,)


def _self_centred(scores):
    T = scores.shape[-1]
    diag = torch.diagonal(scores, dim1=-2, dim2=-1).mean(-1)  # (K,)
    off = (scores.sum((-2, -1)) - diag * T) / (T * T - T)
    return int((diag - off).argmax())


ITEMS.append(
    Item(
        id="ex03_shared_projection_head",
        notebook=NOTEBOOK,
        function="shared_projection_head",
        points=1,
        task="interpret: the index of the head whose scores come from one shared projection (W_Q = W_K)",
        make_cases=_symmetric_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        reference=lambda scores: int(_asymmetry(scores).argmin()),
        mistakes=(Mistake("self-centred", PICKED_SELF_CENTRED, variant=_self_centred),),
    )
)

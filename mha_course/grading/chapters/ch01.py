"""Chapter 1's graded items: softmax, dot-product scores, attention as a weighted average (NumPy)."""

from __future__ import annotations

import numpy as np

from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import ATTENTION
from mha_course.ops.numpy_attention import dot_product_attention, softmax
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex01_dot_product_attention"
# graded alone when an earlier task fails: the course\'s own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes."
# The package's softmaxes are task 1's answer. torch.softmax is one too, but it is the primitive the
# task is (no list can forbid it: scipy.special.softmax is another). A NumPy child does not import
# torch; torch's names on an item's list are wired if learner code imports it (the engine's
# tripwires.py), and looked for in the source.
_FORBID = (
    "mha_course.ops.numpy_attention.softmax",
    "mha_course.ops.numpy_attention.dot_product_attention",
    "mha_course.ops.sdpa.stable_softmax",
)


WHOLE_ARRAY = (
    "normalised over the whole array: all the entries together sum to 1, not each row "
    "(chapter 1's one-vector softmax applied to a (..., S) array)"
)


def _whole_array_softmax(x: np.ndarray) -> np.ndarray:
    """One max and one sum over every entry: chapter 1's 1-D softmax copied for 2-D input."""
    e = np.exp(x - x.max())
    return e / e.sum()


def _weighted(weights: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(weights @ values, weights)``: what attend returns, for given (possibly wrong) weights."""
    return weights @ values, weights  # (L, S) @ (S, Dv) -> (L, Dv)


def _softmax_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"x": rng.normal(size=(3, 5))},
        {"x": rng.normal(size=7)},
        {"x": rng.normal(size=(4, 6)) * 300 + 500},  # exp would overflow without the max trick
        # rows 1000 apart: the max must be each row's own (the whole array's leaves a row of 0/0)
        {"x": rng.normal(size=(3, 4)) * 3 + np.array([[0.0], [1000.0], [-1000.0]])},
    ]


def _scores_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"query": rng.normal(size=(3, 4)), "keys": rng.normal(size=(5, 4))},
        {"query": rng.normal(size=(1, 8)), "keys": rng.normal(size=(6, 8))},
    ]


def _attend_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "query": rng.normal(size=(3, 4)),
            "keys": rng.normal(size=(5, 4)),
            "values": rng.normal(size=(5, 2)),
        },
        {
            "query": rng.normal(size=(4, 8)),
            "keys": rng.normal(size=(4, 8)),
            "values": rng.normal(size=(4, 3)),
        },
    ]


ITEMS = [
    Item(
        id="ex01_softmax",
        notebook=NOTEBOOK,
        function="softmax",
        points=1,
        framework="numpy",
        task="numerically stable softmax over the last axis",
        make_cases=_softmax_cases,
        reference=lambda x: softmax(x, axis=-1),
        shape="(..., S)",
        mistakes=(
            Mistake(
                "overflow",
                M.OVERFLOW,
                variant=lambda x: M.np_naive_softmax(x, axis=-1),
                status="non-finite",
            ),
            Mistake(
                "wrong axis",
                "softmax over the wrong axis: each ROW (the last axis) must sum to 1",
                variant=lambda x: softmax(x, axis=0),
            ),
            Mistake("whole array", WHOLE_ARRAY, variant=_whole_array_softmax),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex01_scores",
        notebook=NOTEBOOK,
        function="dot_scores",
        points=1,
        framework="numpy",
        task="scores[i, j] = query[i] · keys[j]",
        make_cases=_scores_cases,
        reference=lambda q, k: q @ k.T,
        shape="(L, S)",
        mistakes=(
            Mistake(
                "transposed",
                "scores transposed: rows are keys (S), columns are queries (L); the "
                "task's rows are queries",
                variant=lambda q, k: k @ q.T,
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex01_attend",
        uses=("softmax", "dot_scores"),
        substitutes=(("softmax", _SUB + "softmax"), ("dot_scores", _SUB + "dot_scores")),
        notebook=NOTEBOOK,
        function="attend",
        points=2,
        framework="numpy",
        task="(output, weights): weights = softmax(query @ keys.T), output = weights @ values (a weighted average)",
        make_cases=_attend_cases,
        # the weights too: torch's SDPA (scale=1) returns the output only (issue 19, item 9)
        reference=lambda q, k, v: dot_product_attention(q, k, v),
        shape="(L, Dv), (L, S)",
        mistakes=(
            Mistake(
                "wrong axis",
                M.WRONG_AXIS,
                variant=lambda q, k, v: _weighted(softmax(q @ k.T, axis=0), v),
            ),
            Mistake(
                "no softmax",
                "the raw scores were used as weights: they are not positive and "
                "do not sum to 1 per query",
                variant=lambda q, k, v: _weighted(q @ k.T, v),
            ),
            Mistake(
                "scaled",
                "chapter 1's attention is unscaled: the 1/sqrt(D) comes in chapter 2",
                variant=lambda q, k, v: dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5),
            ),
        ),
        # SDPA with [V | I] as the values returns the weights beside the output in one call; so
        # does any attention function here (torch's are wired if a cell imports torch)
        forbidden=(*_FORBID, *ATTENTION),
    ),
]


# ---- debug: a given attention-weights function normalises over the wrong axis -----------------
HALF_FIXED = (
    "half fixed: the maximum subtracted and the sum divided by must both run over the "
    "keys (axis -1); mixing axes gives weights that are not a softmax of the row"
)


def _np_softmax_axes(scores: np.ndarray, max_axis: int, sum_axis: int) -> np.ndarray:
    """``exp(s - max over max_axis) / sum over sum_axis``: the given bug and its half fixes."""
    with np.errstate(invalid="ignore"):  # a half fix can underflow a whole row: 0 / 0
        e = np.exp(scores - scores.max(axis=max_axis, keepdims=True))
        return e / e.sum(axis=sum_axis, keepdims=True)


def _weights_cases(rng: np.random.Generator) -> list[dict]:
    L, S = (int(n) for n in rng.integers(3, 9, size=2))
    return [
        {
            "query": rng.normal(size=(4, 4)),
            "keys": rng.normal(size=(4, 4)),
        },  # square: no shape error
        {"query": rng.normal(size=(L, 6)) * 2, "keys": rng.normal(size=(S, 6)) * 2},
        {
            "query": rng.normal(size=(3, 5)) * 20,
            "keys": rng.normal(size=(7, 5)) * 20,
        },  # large scores
    ]


ITEMS.append(
    Item(
        id="ex01_fix_weights",
        notebook=NOTEBOOK,
        function="attention_weights",
        points=1,
        framework="numpy",
        task="debug: attention_weights_buggy corrected (the weights of query @ keys.T over the keys)",
        make_cases=_weights_cases,
        reference=lambda q, k: softmax(q @ k.T, axis=-1),
        shape="(L, S)",
        mistakes=(
            Mistake(
                "wrong axis (the given bug)",
                M.WRONG_AXIS,
                variant=lambda q, k: _np_softmax_axes(q @ k.T, 0, 0),
            ),
            Mistake(
                "half fixed", HALF_FIXED, variant=lambda q, k: _np_softmax_axes(q @ k.T, 0, -1)
            ),
            Mistake(
                "half fixed", HALF_FIXED, variant=lambda q, k: _np_softmax_axes(q @ k.T, -1, 0)
            ),
            Mistake(
                "overflow",
                M.OVERFLOW,
                status="non-finite",
                variant=lambda q, k: M.np_naive_softmax(q @ k.T, axis=-1),
            ),
        ),
        forbidden=_FORBID,
    )
)

"""Chapter 2's graded items: scaled scores, the causal mask, additive masks, masked SDPA (torch)."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.benchmark import flops as flop_counts
from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import (
    ATTENTION,
    CAUSAL_MASKS,
    NUMPY_ATTENTION,
    defining_name,
)
from mha_course.ops.masks import causal_mask, to_additive
from mha_course.ops.sdpa import scaled_dot_product_attention
from mha_grader.items import Dtype, Item, Mistake

NOTEBOOK = "ex02_scaled_dot_product_attention"
# graded alone when an earlier task fails: the course\'s own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes."
_SDPA_FORBID = ATTENTION + NUMPY_ATTENTION
# Items that need no attention forbidden share one unit (SDPA's name is also searched for in the
# source, per notebook: forbidding it here would cost these items a learner's SDPA in task 4).
_FLOPS_FORBID = (defining_name(flop_counts.attention_flops),)


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def _scores_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"query": _f32(rng, 2, 3, 5, 8), "key": _f32(rng, 2, 3, 7, 8)},
        {"query": rng.normal(size=(4, 16)), "key": rng.normal(size=(6, 16))},
    ]


def _causal_cases(rng: np.random.Generator) -> list[dict]:
    L = int(rng.integers(4, 12))
    L2, S2 = (int(n) for n in rng.integers(2, 10, size=2))
    wide = [
        {"L": int(L), "S": int(S)} for L, S in rng.integers(2, 41, size=(3, 2))
    ]  # rarely shared
    return [{"L": L, "S": L}, {"L": 3, "S": 6}, {"L": 6, "S": 4}, {"L": L2, "S": S2}, *wide]


def _additive_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"mask": rng.random((4, 6)) < 0.6, "dtype": Dtype("float32")},
        {"mask": rng.random((2, 1, 3, 5)) < 0.5, "dtype": Dtype("float64")},
    ]


def _bool_mask(rng: np.random.Generator, L: int, S: int) -> np.ndarray:
    m = rng.random((L, S)) < 0.6
    m[np.arange(L), rng.integers(0, S, size=L)] = True  # every query sees at least one key
    return m


def _attention_cases(rng: np.random.Generator) -> list[dict]:
    causal = np.tril(np.ones((4, 4), dtype=bool))
    return [
        {
            "query": _f32(rng, 2, 3, 4, 8),
            "key": _f32(rng, 2, 3, 6, 8),
            "value": _f32(rng, 2, 3, 6, 5),
            "attn_mask": None,
        },
        {
            "query": rng.normal(size=(5, 16)),
            "key": rng.normal(size=(7, 16)),
            "value": rng.normal(size=(7, 4)),
            "attn_mask": _bool_mask(rng, 5, 7),
        },
        {
            "query": _f32(rng, 2, 4, 8),
            "key": _f32(rng, 2, 4, 8),
            "value": _f32(rng, 2, 4, 3),
            "attn_mask": np.where(causal, 0.0, -np.inf).astype(np.float32),
        },
        {
            "query": rng.normal(size=(6, 8)) * 30,
            "key": rng.normal(size=(6, 8)) * 30,
            "value": rng.normal(size=(6, 3)),
            "attn_mask": np.tril(np.ones((6, 6), dtype=bool)),
        },
        {  # an additive mask that is a bias, not only 0 / -inf (ALiBi's: -slope |i - j|)
            "query": _f32(rng, 2, 5, 8),
            "key": _f32(rng, 2, 7, 8),
            "value": _f32(rng, 2, 7, 3),
            "attn_mask": (
                -rng.uniform(0.25, 1.0) * np.abs(np.arange(5)[:, None] - np.arange(7)[None, :])
            ).astype(np.float32),
        },
    ]


def _finite_fill(out: np.ndarray, case: dict) -> bool:
    m = case["mask"]
    return bool(
        out.shape == m.shape
        and (out[m] == 0).all()
        and np.isfinite(out[~m]).all()
        and (out[~m] < -1e3).all()
    )


ITEMS = [
    Item(
        id="ex02_scaled_scores",
        notebook=NOTEBOOK,
        function="scaled_scores",
        points=1,
        task="scores = query @ keyᵀ / sqrt(D)",
        make_cases=_scores_cases,
        shape="(..., L, S)",
        reference=lambda q, k: (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
        mistakes=(
            Mistake("no scaling", M.NO_SCALE, variant=lambda q, k: q @ k.transpose(-2, -1)),
            Mistake(
                "scaled by 1/D",
                M.SCALE_BY_D,
                variant=lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1],
            ),
            Mistake(
                "transposed",
                "scores transposed: (..., L, S) is query @ keyᵀ, not key @ queryᵀ",
                variant=lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]),
            ),
        ),
        forbidden=_FLOPS_FORBID,  # nothing computes the scores alone; shares task 5's unit
    ),
    Item(
        id="ex02_causal_mask",
        notebook=NOTEBOOK,
        function="make_causal_mask",
        points=1,
        task="bool (L, S) mask, True where query i may attend to key j (j <= i)",
        make_cases=_causal_cases,
        shape="(L, S)",
        reference=lambda L, S: causal_mask(L, S),
        mistakes=(
            Mistake(
                "inverted",
                M.MASK_INVERTED,
                variant=lambda L, S: M.causal_mask_variant(L, S, inverted=True),
            ),
            Mistake(
                "off by one",
                M.CAUSAL_OFF_BY_ONE,
                variant=lambda L, S: M.causal_mask_variant(L, S, shift=-1),
            ),
            Mistake(
                "off by one",
                M.CAUSAL_OFF_BY_ONE,
                variant=lambda L, S: M.causal_mask_variant(L, S, shift=1),
            ),
        ),
        forbidden=CAUSAL_MASKS,
    ),
    Item(
        id="ex02_additive_mask",
        notebook=NOTEBOOK,
        function="additive_mask",
        points=1,
        task="bool mask (True = may attend) -> float mask: 0 where allowed, -inf where not",
        make_cases=_additive_cases,
        shape="(..., L, S)",
        reference=lambda m, dtype: to_additive(m, dtype),
        mistakes=(
            Mistake("inverted", M.MASK_INVERTED, variant=lambda m, dtype: to_additive(~m, dtype)),
            Mistake(
                "finite fill",
                "masked positions must be -inf (a finite number like -1e9 "
                "still leaks a tiny weight, and overflows in float16)",
                matches=_finite_fill,
            ),
        ),
        forbidden=("mha_course.ops.masks.to_additive",),
    ),
    Item(
        id="ex02_attention",
        uses=("scaled_scores",),
        substitutes=(("scaled_scores", _SUB + "scaled_scores"),),
        notebook=NOTEBOOK,
        function="attention",
        points=3,
        task="(softmax(query @ keyᵀ / sqrt(D) + mask) @ value, the weights), bool or additive attn_mask",
        make_cases=_attention_cases,
        shape="(..., L, Dv), (..., L, S)",
        # the weights too: SDPA and flex_attention do not return them (issue 19, item 9)
        reference=lambda q, k, v, m: scaled_dot_product_attention(
            q, k, v, attn_mask=m, return_weights=True
        ),
        mistakes=(
            Mistake(
                "no scaling",
                M.NO_SCALE,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, scale="none", return_weights=True
                ),
            ),
            Mistake(
                "wrong axis",
                M.WRONG_AXIS,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, softmax_dim=-2, return_weights=True
                ),
            ),
            Mistake(
                "additive mask read as allow/block",
                M.ADDITIVE_AS_BOOL,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, mask_mode="as_bool", return_weights=True
                ),
            ),
            Mistake(
                "mask inverted",
                M.MASK_INVERTED,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, mask_mode="inverted", return_weights=True
                ),
            ),
            # the same mistake with torch.softmax (NaN, not 0, on a row the inverted mask blocks entirely)
            Mistake(
                "mask inverted",
                M.MASK_INVERTED,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, mask_mode="inverted", softmax="naive", return_weights=True
                ),
            ),
            Mistake(
                "mask after softmax",
                M.MASK_AFTER_SOFTMAX,
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, mask_mode="after_softmax", return_weights=True
                ),
            ),
            Mistake(
                "overflow",
                M.OVERFLOW,
                status="non-finite",
                variant=lambda q, k, v, m: M.attention_variant(
                    q, k, v, m, softmax="naive", return_weights=True
                ),
            ),
        ),
        forbidden=_SDPA_FORBID,
    ),
]


# ---- predict then measure: the FLOPs of one attention forward ---------------------------------
FLOPS_MULTIPLY_ADDS = "counted multiply-adds: one multiply-add is 2 FLOPs (the course's convention)"
FLOPS_ONE_MATMUL = (
    "counted only the scores Q Kᵀ (2·L·S·D per head): the weighted sum of the values "
    "costs 2·L·S·Dv more"
)
FLOPS_NO_BATCH = (
    "counted one batch entry and one head: every batch entry and every head does the work"
)


def _flops_cases(rng: np.random.Generator) -> list[dict]:
    def case():
        B, H = (int(n) for n in rng.integers(1, 9, size=2))
        L, S = (int(n) for n in rng.integers(16, 4097, size=2))
        D, Dv = (int(n) for n in rng.choice([16, 32, 48, 64, 80, 96, 128], size=2))
        return {"B": B, "H": H, "L": L, "S": S, "D": D, "Dv": Dv}

    return [case() for _ in range(3)]


def _flops(B, H, L, S, D, Dv, *, per_fma=2, matmuls=2, batch=True):
    """2·B·H·L·S·(D + Dv): Q Kᵀ is L·S·D multiply-adds per head, weights @ V L·S·Dv (softmax
    not counted, as in ``benchmark.flops.attention_flops``, which assumes Dv = D)."""
    work = L * S * D + (L * S * Dv if matmuls == 2 else 0)  # multiply-adds per head
    return per_fma * work * (B * H if batch else 1)


# ---- interpret: which mask produced these weights? --------------------------------------------
def _candidate_masks(rng: np.random.Generator, L: int, S: int) -> list[np.ndarray]:
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    window = int(rng.integers(2, 4))
    pad = np.ones((L, S), dtype=bool)
    pad[:, int(rng.integers(1, S)) :] = False  # one sequence's padding: its last keys
    return [j <= i, j <= i + 1, (j <= i) & (j > i - window), pad, np.ones((L, S), dtype=bool)]


def _mask_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for L, S in ((6, 6), (int(rng.integers(5, 10)), int(rng.integers(8, 13))), (7, 7)):
        masks = _candidate_masks(rng, L, S)
        truth = int(
            rng.integers(len(masks) - 1)
        )  # never the all-True mask: it must stay a superset
        masks.append(~masks[truth])  # its inverse is a candidate too: the inverted reading picks it
        order = list(rng.permutation(len(masks)))
        everything = (
            len(masks) - 2
        )  # the all-True mask goes before the truth: a half check picks it
        if order.index(everything) > order.index(truth):
            i, j = order.index(everything), order.index(truth)
            order[i], order[j] = order[j], order[i]
        masks = [masks[k] for k in order]
        pos = order.index(truth)
        q, k = rng.normal(size=(L, 8)), rng.normal(size=(S, 8))
        scores = np.where(masks[pos], q @ k.T / np.sqrt(8), -np.inf)  # (L, S)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        cases.append(
            {
                "weights": (weights / weights.sum(-1, keepdims=True)).astype(np.float32),
                "masks": np.stack(masks),
            }
        )
    return cases


def _which_mask(weights, masks, inverted=False):
    """Index of the candidate whose blocked keys are exactly the zero weights (True = may attend)."""
    seen = weights > 0  # (L, S): a masked key gets exactly 0 (exp(-inf)); a visible one never does
    hits = [
        k for k in range(masks.shape[0]) if torch.equal(~masks[k] if inverted else masks[k], seen)
    ]
    return hits[0] if hits else -1


def _zeros_inside(weights, masks):
    """The half check: the first candidate under which every visible key is allowed (it may
    allow keys that got weight 0, which the mask would have blocked)."""
    seen = weights > 0
    return next(k for k in range(masks.shape[0]) if bool((masks[k] | ~seen).all()))


ITEMS += [
    Item(
        id="ex02_predict_flops",
        notebook=NOTEBOOK,
        function="predict_attention_flops",
        points=1,
        task="predict: FLOPs of Q Kᵀ and weights @ V for (B, H, L, S, D, Dv), before measuring them",
        make_cases=_flops_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        reference=_flops,
        mistakes=(
            Mistake("multiply-adds", FLOPS_MULTIPLY_ADDS, variant=lambda *a: _flops(*a, per_fma=1)),
            Mistake("one matmul", FLOPS_ONE_MATMUL, variant=lambda *a: _flops(*a, matmuls=1)),
            Mistake(
                "one matmul",
                f"{FLOPS_ONE_MATMUL}; and {FLOPS_MULTIPLY_ADDS}",
                variant=lambda *a: _flops(*a, matmuls=1, per_fma=1),
            ),
            Mistake("no B·H", FLOPS_NO_BATCH, variant=lambda *a: _flops(*a, batch=False)),
        ),
        forbidden=_FLOPS_FORBID,
    ),
    Item(
        id="ex02_which_mask",
        notebook=NOTEBOOK,
        function="which_mask",
        points=1,
        task="interpret: the index of the candidate bool mask (True = may attend) that produced these weights",
        make_cases=_mask_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        reference=_which_mask,
        mistakes=(
            Mistake(
                "inverted reading",
                M.MASK_INVERTED,
                variant=lambda w, m: _which_mask(w, m, inverted=True),
            ),
            Mistake(
                "half check",
                "a mask must block EXACTLY the zero-weight keys: a candidate that "
                "blocks more (or fewer) keys is a different mask",
                variant=_zeros_inside,
            ),
        ),
        forbidden=_FLOPS_FORBID,  # nothing computes it; shares task 5's unit
    ),
]

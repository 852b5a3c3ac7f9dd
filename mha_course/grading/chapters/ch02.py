"""Chapter 2's graded items: scaled scores, the causal mask, additive masks, masked SDPA (torch)."""

from __future__ import annotations

import math

import numpy as np

from mha_grader.items import Dtype, Item, Mistake

from ...masks import causal_mask, to_additive
from ...sdpa import scaled_dot_product_attention
from .. import mistakes as M

NOTEBOOK = "ex02_scaled_dot_product_attention"
_SDPA_FORBID = ("torch.nn.functional.scaled_dot_product_attention",
                "mha_course.sdpa.scaled_dot_product_attention", "torch.nn.MultiheadAttention")


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
    return [{"L": L, "S": L}, {"L": 3, "S": 6}, {"L": 6, "S": 4}, {"L": L2, "S": S2}]


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
        {"query": _f32(rng, 2, 3, 4, 8), "key": _f32(rng, 2, 3, 6, 8),
         "value": _f32(rng, 2, 3, 6, 5), "attn_mask": None},
        {"query": rng.normal(size=(5, 16)), "key": rng.normal(size=(7, 16)),
         "value": rng.normal(size=(7, 4)), "attn_mask": _bool_mask(rng, 5, 7)},
        {"query": _f32(rng, 2, 4, 8), "key": _f32(rng, 2, 4, 8), "value": _f32(rng, 2, 4, 3),
         "attn_mask": np.where(causal, 0.0, -np.inf).astype(np.float32)},
        {"query": rng.normal(size=(6, 8)) * 30, "key": rng.normal(size=(6, 8)) * 30,
         "value": rng.normal(size=(6, 3)), "attn_mask": np.tril(np.ones((6, 6), dtype=bool))},
    ]


def _finite_fill(out: np.ndarray, case: dict) -> bool:
    m = case["mask"]
    return bool(out.shape == m.shape and (out[m] == 0).all() and np.isfinite(out[~m]).all()
                and (out[~m] < -1e3).all())


ITEMS = [
    Item(
        id="ex02_scaled_scores", notebook=NOTEBOOK, function="scaled_scores", points=1,
        task="scores = query @ keyᵀ / sqrt(D)",
        make_cases=_scores_cases, shape="(..., L, S)",
        reference=lambda q, k: (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]),
        mistakes=(
            Mistake("no scaling", M.NO_SCALE, variant=lambda q, k: q @ k.transpose(-2, -1)),
            Mistake("scaled by 1/D", M.SCALE_BY_D,
                    variant=lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1]),
            Mistake("transposed", "scores transposed: (..., L, S) is query @ keyᵀ, not key @ queryᵀ",
                    variant=lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])),
        ),
    ),
    Item(
        id="ex02_causal_mask", notebook=NOTEBOOK, function="make_causal_mask", points=1,
        task="bool (L, S) mask, True where query i may attend to key j (j <= i)",
        make_cases=_causal_cases, shape="(L, S)", reference=lambda L, S: causal_mask(L, S),
        mistakes=(
            Mistake("inverted", M.MASK_INVERTED,
                    variant=lambda L, S: M.causal_mask_variant(L, S, inverted=True)),
            Mistake("off by one", M.CAUSAL_OFF_BY_ONE,
                    variant=lambda L, S: M.causal_mask_variant(L, S, shift=-1)),
            Mistake("off by one", M.CAUSAL_OFF_BY_ONE,
                    variant=lambda L, S: M.causal_mask_variant(L, S, shift=1)),
        ),
        forbidden=("mha_course.masks.causal_mask",),
    ),
    Item(
        id="ex02_additive_mask", notebook=NOTEBOOK, function="additive_mask", points=1,
        task="bool mask (True = may attend) -> float mask: 0 where allowed, -inf where not",
        make_cases=_additive_cases, shape="(..., L, S)",
        reference=lambda m, dtype: to_additive(m, dtype),
        mistakes=(
            Mistake("inverted", M.MASK_INVERTED,
                    variant=lambda m, dtype: to_additive(~m, dtype)),
            Mistake("finite fill", "masked positions must be -inf (a finite number like -1e9 "
                    "still leaks a tiny weight, and overflows in float16)", matches=_finite_fill),
        ),
        forbidden=("mha_course.masks.to_additive",),
    ),
    Item(
        id="ex02_attention", notebook=NOTEBOOK, function="attention", points=3,
        task="softmax(query @ keyᵀ / sqrt(D) + mask) @ value, bool or additive attn_mask",
        make_cases=_attention_cases, shape="(..., L, Dv)",
        reference=lambda q, k, v, m: scaled_dot_product_attention(q, k, v, attn_mask=m),
        mistakes=(
            Mistake("no scaling", M.NO_SCALE,
                    variant=lambda q, k, v, m: M.attention_variant(q, k, v, m, scale="none")),
            Mistake("wrong axis", M.WRONG_AXIS,
                    variant=lambda q, k, v, m: M.attention_variant(q, k, v, m, softmax_dim=-2)),
            Mistake("mask inverted", M.MASK_INVERTED,
                    variant=lambda q, k, v, m: M.attention_variant(q, k, v, m, mask_mode="inverted")),
            Mistake("mask after softmax", M.MASK_AFTER_SOFTMAX,
                    variant=lambda q, k, v, m: M.attention_variant(q, k, v, m,
                                                                   mask_mode="after_softmax")),
            Mistake("overflow", M.OVERFLOW, status="non-finite",
                    variant=lambda q, k, v, m: M.attention_variant(q, k, v, m, softmax="naive")),
        ),
        forbidden=_SDPA_FORBID,
    ),
]

"""Chapter 18's graded items: masks and a bias as FlexAttention functions of the indices."""

from __future__ import annotations

import numpy as np

from mha_course.ops.flex_masks import alibi, document_causal, sliding_window
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex18_flex_attention"
# Reviewed: the package's mask/score mods, chapter 14's banded mask and chapter 12's ALiBi bias
# (the cases use the standard slopes) each answer an item.
_FORBID = (
    "mha_course.ops.flex_masks.causal",
    "mha_course.ops.flex_masks.sliding_window",
    "mha_course.ops.flex_masks.prefix_lm",
    "mha_course.ops.flex_masks.document_causal",
    "mha_course.ops.flex_masks.alibi",
    "mha_course.caches.window.sliding_window_mask",
    "mha_course.ops.positions.alibi_bias",
    "mha_course.ops.positions.alibi_slopes",
)
_WINDOW_OFF_BY_ONE = "window one too wide: each query sees one key more than the window"
_WINDOW_NOT_CAUSAL = "window not causal: keys after the query (j > i) must stay masked"
_DOC_NOT_CAUSAL = "documents not causal: within a document, key j must also satisfy j <= i"
_DOC_ACROSS = "documents ignored: a query may only see keys with the same doc_ids value"
_ALIBI_SIGN = "bias added: ALiBi subtracts slope * distance (nearer keys score higher)"
_ALIBI_NO_ABS = "distance without abs: the bias is -slope * |i - j| on both sides of the diagonal"


def _grid(L, S):
    return np.arange(L).reshape(L, 1), np.arange(S).reshape(1, S)  # (L, 1), (1, S)


def _window_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    n, extra = (
        int(rng.integers(6, 25)),
        int(rng.integers(1, 12)),
    )  # wide: no two students share inputs
    for L, S, w in [(9, 9, 3), (6, 11, 4), (12, 12, 1), (n, n + extra, int(rng.integers(2, n)))]:
        q, k = _grid(L, S)
        cases.append({"q_idx": q, "kv_idx": k, "window": w})
    return cases


def _doc_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for T in (10, 13, 16):
        doc_ids = np.sort(rng.integers(0, 3, size=T))  # (T,) packed documents, in order
        q, k = _grid(T, T)
        cases.append({"q_idx": q, "kv_idx": k, "doc_ids": doc_ids})
    return cases


def _alibi_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for H, L, S, dtype in [(4, 5, 5, np.float32), (2, 4, 7, np.float64), (8, 6, 6, np.float32)]:
        q, k = _grid(L, S)
        cases.append(
            {
                "score": rng.normal(size=(H, L, S)).astype(dtype),
                "h": np.arange(H).reshape(H, 1, 1),
                "q_idx": q[None],
                "kv_idx": k[None],
                "slopes": (2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(dtype),
            }
        )
    return cases


ITEMS = [
    Item(
        id="ex18_sliding_window",
        notebook=NOTEBOOK,
        function="sliding_window_mask",
        points=1,
        task="causal sliding window: i - window < j <= i",
        make_cases=_window_cases,
        shape="(L, S) bool",
        reference=lambda q, k, w: sliding_window(w)(None, None, q, k),
        mistakes=(
            Mistake(
                "off by one", _WINDOW_OFF_BY_ONE, variant=lambda q, k, w: (q >= k) & (q - k <= w)
            ),
            Mistake("not causal", _WINDOW_NOT_CAUSAL, variant=lambda q, k, w: (q - k).abs() < w),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex18_document_mask",
        notebook=NOTEBOOK,
        function="document_mask",
        points=1,
        task="packed documents: same document and causal",
        make_cases=_doc_cases,
        shape="(T, T) bool",
        reference=lambda q, k, d: document_causal(d)(None, None, q, k),
        mistakes=(
            Mistake("not causal", _DOC_NOT_CAUSAL, variant=lambda q, k, d: d[q] == d[k]),
            Mistake("documents ignored", _DOC_ACROSS, variant=lambda q, k, d: q >= k),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex18_alibi",
        notebook=NOTEBOOK,
        function="alibi_score",
        points=1,
        task="ALiBi score_mod: score - slopes[h] * |i - j|",
        make_cases=_alibi_cases,
        shape="(H, L, S)",
        reference=lambda s, h, q, k, slopes: alibi(slopes)(s, None, h, q, k),
        mistakes=(
            Mistake(
                "sign",
                _ALIBI_SIGN,
                variant=lambda s, h, q, k, slopes: s + slopes[h] * (q - k).abs(),
            ),
            Mistake(
                "no abs", _ALIBI_NO_ABS, variant=lambda s, h, q, k, slopes: s - slopes[h] * (q - k)
            ),
        ),
        forbidden=_FORBID,
    ),
]

"""Chapter 18's graded items, each a step beyond the lecture's one-line rules: a prefix-LM inside
every packed document (positions counted from the document's own start), a learned relative-position
bias table as a ``score_mod`` (ALiBi's general form, clipped), and a BlockMask's three kinds of
block worked out by hand from a dense mask (ragged edges included)."""

from __future__ import annotations

import numpy as np
import torch

from mha_grader.items import Item, Mistake

NOTEBOOK = "ex18_flex_attention"
# Reviewed: the package's mask/score mods, chapter 14's banded mask, chapter 12's ALiBi bias and
# torch's own mask builders each answer part of an item.
_FORBID = (
    "mha_course.ops.flex_masks.causal",
    "mha_course.ops.flex_masks.sliding_window",
    "mha_course.ops.flex_masks.prefix_lm",
    "mha_course.ops.flex_masks.document_causal",
    "mha_course.ops.flex_masks.alibi",
    "mha_course.ops.flex_masks.block_counts",
    "mha_course.caches.window.sliding_window_mask",
    "mha_course.caches.window._visible",  # its band rule, unchecked (the caches' own)
    "mha_course.ops.positions.alibi_bias",
    "mha_course.ops.positions.alibi_slopes",
    "torch.nn.attention.flex_attention.create_block_mask",
    "torch.nn.attention.flex_attention.create_mask",
)
_PREFIX_GLOBAL = (
    "prefix counted from the packed sequence's start, not from each document's first token"
)
_PREFIX_ACROSS = "a document's prefix is visible to queries of other documents"
_PREFIX_NOT_CAUSAL = (
    "not causal after the prefix: a later key (j > i) outside the prefix is visible"
)
_REL_REVERSED = "distance reversed: keys before the query got the bias meant for keys after it (i - j for j - i)"
_REL_NO_SHIFT = (
    "columns off by max_distance: a distance of 0 read column 0, and negative distances read "
    "columns from the table's end"
)
_BLOCK_EDGE_FULL = (
    "a ragged edge block counted full: positions past L or S are masked, so such a block is partial"
)
_BLOCK_SWAPPED = "kinds swapped: 1 is partial (some pairs allowed), 2 is full (every pair)"


def _grid(L, S):
    return np.arange(L).reshape(L, 1), np.arange(S).reshape(1, S)  # (L, 1), (1, S)


# ---- task 1: a prefix-LM inside every packed document ------------------------------------------
def _doc_start(d: torch.Tensor) -> torch.Tensor:
    """(T,) the first position of each position's document (documents contiguous, ids sorted)."""
    return torch.searchsorted(d, d)


def _doc_prefix(q, k, d, n):
    start = _doc_start(d)
    return (d[q] == d[k]) & ((k - start[k] < n) | (q >= k))


def _doc_prefix_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for T, n in ((10, 2), (14, 3), (16, 1), (int(rng.integers(12, 30)), int(rng.integers(1, 5)))):
        doc_ids = np.sort(rng.integers(0, 4, size=T))  # (T,) packed documents, in order
        doc_ids[0] = 0  # the first document starts the sequence
        q, k = _grid(T, T)
        cases.append({"q_idx": q, "kv_idx": k, "doc_ids": doc_ids, "prefix_len": n})
    return cases


# ---- task 2: a clipped relative-position bias table as a score_mod ------------------------------
def _rel_bias(s, h, q, k, table, M):
    return s + table[h, (k - q).clamp(-M, M) + M]


def _rel_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for H, L, S, M, dtype in [
        (2, 5, 5, 2, np.float32),
        (4, 6, 9, 3, np.float64),
        (3, 7, 7, 10, np.float32),  # max_distance beyond every distance: no clipping
        (2, int(rng.integers(4, 12)), int(rng.integers(4, 12)), 1, np.float64),
    ]:
        q, k = _grid(L, S)
        cases.append(
            {
                "score": rng.normal(size=(H, L, S)).astype(dtype),
                "h": np.arange(H).reshape(H, 1, 1),
                "q_idx": q[None],
                "kv_idx": k[None],
                "table": rng.normal(size=(H, 2 * M + 1)).astype(dtype),
                "max_distance": M,
            }
        )
    return cases


# ---- task 3: a BlockMask's kinds of block, by hand ----------------------------------------------
def _block_kinds(mask, block, edge_full=False):
    L, S = mask.shape
    nq, nk = -(-L // block), -(-S // block)  # ceil
    padded = torch.zeros(nq * block, nk * block, dtype=torch.bool)
    padded[:L, :S] = mask
    some = padded.view(nq, block, nk, block).any(
        dim=(1, 3)
    )  # (nq*B, nk*B) -> (nq, B, nk, B) -> (nq, nk)
    if edge_full:  # the mistake: positions past L or S taken as allowed
        padded[L:, :] = True
        padded[:, S:] = True
    every = padded.view(nq, block, nk, block).all(
        dim=(1, 3)
    )  # (nq*B, nk*B) -> (nq, B, nk, B) -> (nq, nk)
    return some.long() + (every & some).long()  # 0 skipped, 1 partial, 2 full


def _block_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for L, S, block in [(8, 8, 4), (10, 10, 4), (12, 7, 3), (int(rng.integers(9, 30)), 16, 8)]:
        q, k = _grid(L, S)
        kind = rng.integers(0, 3)
        if kind == 0:  # a causal band
            mask = (q >= k) & (q - k < int(rng.integers(2, 6)))
        elif kind == 1:  # packed documents
            d = np.sort(rng.integers(0, 3, size=max(L, S)))
            mask = (d[q] == d[k]) & (q >= k)
        else:  # random pairs with whole blocks on and off
            mask = rng.random((L, S)) < 0.5
            mask[:block, :block] = True
            mask[-block:, :block] = False
        if L % block or S % block:  # a ragged corner tile, all of it allowed: partial, never full
            mask[L - L % block or L - block :, S - S % block or S - block :] = True
        cases.append({"mask": np.ascontiguousarray(mask), "block": block})
    return cases


ITEMS = [
    Item(
        id="ex18_document_prefix",
        notebook=NOTEBOOK,
        function="document_prefix_mask",
        points=1,
        task="packed documents, each a prefix-LM: same document, and (key in its document's first "
        "prefix_len tokens, or causal)",
        make_cases=_doc_prefix_cases,
        shape="(T, T) bool",
        reference=_doc_prefix,
        mistakes=(
            Mistake(
                "prefix from the sequence start",
                _PREFIX_GLOBAL,
                variant=lambda q, k, d, n: (d[q] == d[k]) & ((k < n) | (q >= k)),
            ),
            Mistake(
                "prefix across documents",
                _PREFIX_ACROSS,
                variant=lambda q, k, d, n: ((d[q] == d[k]) & (q >= k)) | (k - _doc_start(d)[k] < n),
            ),
            Mistake("not causal", _PREFIX_NOT_CAUSAL, variant=lambda q, k, d, n: d[q] == d[k]),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex18_relative_bias",
        notebook=NOTEBOOK,
        function="relative_bias_score",
        points=1,
        task="score_mod: score + table[h, clip(j - i, -max_distance, max_distance) + max_distance]",
        make_cases=_rel_cases,
        shape="(H, L, S)",
        reference=_rel_bias,
        mistakes=(
            Mistake(
                "reversed",
                _REL_REVERSED,
                variant=lambda s, h, q, k, t, M: s + t[h, (q - k).clamp(-M, M) + M],
            ),
            Mistake(
                "no shift",
                _REL_NO_SHIFT,
                variant=lambda s, h, q, k, t, M: s + t[h, (k - q).clamp(-M, M)],
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex18_block_kinds",
        notebook=NOTEBOOK,
        function="block_kinds",
        points=1,
        task="each (block x block) tile of an (L, S) mask: 0 skipped, 1 partial, 2 full (tiles cut "
        "short by L or S are never full)",
        make_cases=_block_cases,
        shape="(ceil(L / block), ceil(S / block)) int64",
        reference=lambda m, b: _block_kinds(m, b),
        mistakes=(
            Mistake(
                "edge full",
                _BLOCK_EDGE_FULL,
                variant=lambda m, b: _block_kinds(m, b, edge_full=True),
            ),
            Mistake(
                "swapped",
                _BLOCK_SWAPPED,
                variant=lambda m, b: 3 * (_block_kinds(m, b) > 0).long() - _block_kinds(m, b),
            ),
        ),
        forbidden=_FORBID,
    ),
]

"""Chapter 9's graded items: the online-softmax update, one causal tile step, tiled attention."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.grading import mistakes as M
from mha_course.grading.forbidden import ATTENTION, TILED, defining_name
from mha_course.kernels.tiled import online_softmax_update, tiled_attention
from mha_course.ops.flex_masks import block_counts
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex09_flash_attention"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
_FORBID = (*TILED, defining_name(block_counts))  # block_counts: a BlockMask's computed tiles
_FORBID_ATTENTION = (*ATTENTION, defining_name(block_counts))  # includes _FORBID
_NO_RESCALE = (
    "running sum/output not rescaled: when the maximum grows from m to m_new, multiply "
    "the old row_sum and acc by alpha = exp(m - m_new) before adding the new block"
)
_RESCALE_INVERTED = "rescaled by exp(m_new - m): the factor is alpha = exp(m - m_new) <= 1"
_LOCAL_CAUSAL = (
    "causal mask built from the tile's local indices: query row r of the tile is "
    "at position q_start + r and key column c at k_start + c, not r and c"
)
_NOT_NORMALISED = "output not normalised: each row is its weighted sum, not a weighted average"


def _state(rng: np.random.Generator, lead: tuple[int, ...], L: int, Dv: int, dtype, first: bool):
    if first:
        m = np.full((*lead, L), -np.inf)
        row_sum, acc = np.zeros((*lead, L)), np.zeros((*lead, L, Dv))
    else:
        m = rng.normal(size=(*lead, L))
        row_sum = rng.uniform(0.5, 3.0, size=(*lead, L))
        acc = rng.normal(size=(*lead, L, Dv)) * row_sum[..., None]
    return m.astype(dtype), row_sum.astype(dtype), acc.astype(dtype)


def _update_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for lead, L, Sb, Dv, dtype, first, spread in [
        ((), 3, 4, 2, np.float32, False, 3.0),
        ((2,), 4, 5, 3, np.float64, False, 1.0),
        ((2, 2), 3, 6, 4, np.float32, True, 1.0),
        ((), 5, 3, 2, np.float64, False, 40.0),
    ]:
        m, row_sum, acc = _state(rng, lead, L, Dv, dtype, first)
        scores = (rng.normal(size=(*lead, L, Sb)) * spread).astype(dtype)
        value = rng.normal(size=(*lead, Sb, Dv)).astype(dtype)
        cases.append({"m": m, "row_sum": row_sum, "acc": acc, "scores": scores, "value": value})
    return cases


def _update_ref(m, row_sum, acc, scores, value):
    return online_softmax_update(m, row_sum, acc, scores, value)


def _no_rescale(m, row_sum, acc, scores, value):
    m_new = torch.maximum(m, scores.amax(-1))
    p = torch.exp(scores - m_new.unsqueeze(-1))
    return m_new, row_sum + p.sum(-1), acc + p @ value


def _rescale_inverted(m, row_sum, acc, scores, value):
    m_new = torch.maximum(m, scores.amax(-1))
    alpha = torch.exp(m_new - m)
    p = torch.exp(scores - m_new.unsqueeze(-1))
    return m_new, alpha * row_sum + p.sum(-1), alpha.unsqueeze(-1) * acc + p @ value


def _tile_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for lead, Bq, Bk, D, q_start, k_start, causal, dtype, first in [
        ((2,), 4, 4, 8, 4, 4, True, np.float32, True),  # a diagonal tile
        ((), 3, 5, 4, 6, 3, True, np.float64, False),  # crosses the diagonal off-centre
        ((2, 2), 4, 3, 8, 8, 0, True, np.float32, False),  # wholly below the diagonal
        ((2,), 3, 4, 4, 0, 8, False, np.float64, False),
    ]:  # not causal
        m, row_sum, acc = _state(rng, lead, Bq, D, dtype, first)
        q = rng.normal(size=(*lead, Bq, D)).astype(dtype)
        k = rng.normal(size=(*lead, Bk, D)).astype(dtype)
        v = rng.normal(size=(*lead, Bk, D)).astype(dtype)
        cases.append(
            {
                "q_block": q,
                "k_block": k,
                "v_block": v,
                "m": m,
                "row_sum": row_sum,
                "acc": acc,
                "q_start": q_start,
                "k_start": k_start,
                "is_causal": causal,
            }
        )
    return cases


def _tile_scores(q, k, q_start, k_start, causal, scale=True, local=False, shift=0):
    scores = q @ k.transpose(-2, -1)  # (..., Lb, D) @ (..., D, Sb) -> (..., Lb, Sb)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if causal:
        rows = torch.arange(q.shape[-2]) + (0 if local else q_start)
        cols = torch.arange(k.shape[-2]) + (0 if local else k_start)
        scores = scores.masked_fill(cols > rows.unsqueeze(-1) + shift, float("-inf"))
    return scores


def _tile_ref(q, k, v, m, row_sum, acc, q_start, k_start, causal, **kw):
    return online_softmax_update(
        m, row_sum, acc, _tile_scores(q, k, q_start, k_start, causal, **kw), v
    )


def _tiled_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "query": rng.normal(size=(2, 3, 11, 8)).astype(np.float32),
            "key": rng.normal(size=(2, 3, 11, 8)).astype(np.float32),
            "value": rng.normal(size=(2, 3, 11, 8)).astype(np.float32),
            "block_q": 4,
            "block_k": 3,
            "is_causal": True,
        },
        {
            "query": rng.normal(size=(9, 4)),
            "key": rng.normal(size=(13, 4)),
            "value": rng.normal(size=(13, 5)),
            "block_q": 2,
            "block_k": 5,
            "is_causal": False,
        },
        {
            "query": rng.normal(size=(2, 10, 8)) * 20,
            "key": rng.normal(size=(2, 7, 8)) * 20,
            "value": rng.normal(size=(2, 7, 3)),
            "block_q": 3,
            "block_k": 2,
            "is_causal": True,
        },
        {
            "query": rng.normal(size=(1, 6, 4)).astype(np.float32),
            "key": rng.normal(size=(1, 6, 4)).astype(np.float32),
            "value": rng.normal(size=(1, 6, 4)).astype(np.float32),
            "block_q": 16,
            "block_k": 16,
            "is_causal": True,
        },
        _large_case(rng),
    ]


BIG_L = 8192  # one float32 (L, S) matrix is 256 MiB, beyond MEMORY_MB; a (512, 512) tile is 1 MiB
MEMORY_MB = (
    160  # measured: the solution's cells + its blockwise pass on the large case add < 60 MiB
)


def _large_case(rng: np.random.Generator) -> dict:
    """Long enough that the full (L, S) scores cannot exist within ``MEMORY_MB`` (kernel-enforced)."""
    q, k, v = (rng.normal(size=(1, BIG_L, 8)).astype(np.float32) for _ in range(3))
    return {"query": q, "key": k, "value": v, "block_q": 512, "block_k": 512, "is_causal": True}


def _tiled_ref(q, k, v, block_q, block_k, causal):
    """The output and each row's log-sum-exp ``m + log(row_sum)``: SDPA returns only the output
    (issue 19, item 9)."""
    if q.shape[-2] >= BIG_L:  # the large case: torch's fused CPU kernel is the faster oracle (same
        # causal convention), and it returns the log-sum-exp too; as (B, H, L, D): on CPU only 4-D
        # inputs take the fused kernel (~10x less CPU than the 3-D math path, and no (L, S) matrix)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q[None], k[None], v[None], is_causal=causal
        )[:2]  # (1, B, L, D), (1, B, L)
        return out[0], lse[0].to(q.dtype)
    return tiled_attention(
        q, k, v, is_causal=causal, block_q=block_q, block_k=block_k, return_lse=True
    )


def _full_pass(q, k, v, causal, normalise=True, **kw):
    """``(output, lse)`` from the whole score matrix, with one mistake (``_tile_scores``'s
    ``scale``/``shift``, or ``normalise=False``: the output is the unnormalised weighted sum)."""
    scores = _tile_scores(q, k, 0, 0, causal, **kw)  # (..., L, S)
    m = scores.amax(-1)
    p = torch.exp(scores - m.unsqueeze(-1))
    row_sum = p.sum(-1)
    out = p @ v if not normalise else (p / row_sum.unsqueeze(-1)) @ v
    return out, m + torch.log(row_sum)


ITEMS = [
    Item(
        id="ex09_online_update",
        notebook=NOTEBOOK,
        function="online_update",
        points=2,
        task="fold a block of scores into (m, row_sum, acc): rescale by exp(m - m_new), add the block",
        make_cases=_update_cases,
        shape="(..., L), (..., L), (..., L, Dv)",
        reference=_update_ref,
        mistakes=(
            Mistake("no rescaling", _NO_RESCALE, variant=_no_rescale),
            Mistake("rescale inverted", _RESCALE_INVERTED, variant=_rescale_inverted),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex09_tile_step",
        uses=("online_update",),
        substitutes=(("online_update", _SUB + "online_update"),),
        notebook=NOTEBOOK,
        function="tile_step",
        points=2,
        task="scores of one (Bq, Bk) tile, scaled, causally masked at its global offsets, folded in",
        make_cases=_tile_cases,
        shape="(..., Bq), (..., Bq), (..., Bq, D)",
        reference=_tile_ref,
        mistakes=(
            Mistake("no scaling", M.NO_SCALE, variant=lambda *a: _tile_ref(*a, scale=False)),
            Mistake("local indices", _LOCAL_CAUSAL, variant=lambda *a: _tile_ref(*a, local=True)),
            Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=lambda *a: _tile_ref(*a, shift=-1)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex09_tiled_attention",
        uses=("online_update", "tile_step"),
        substitutes=(
            ("online_update", _SUB + "online_update"),
            ("tile_step", _SUB + "tile_step"),
        ),
        notebook=NOTEBOOK,
        function="blockwise_attention",
        points=3,
        task="attention computed block by block (query blocks x key blocks), causal or not; "
        "returns (output, lse), lse = m + log(row_sum) of each query row after its last block",
        make_cases=_tiled_cases,
        shape="(..., L, Dv), (..., L)",
        reference=_tiled_ref,
        mistakes=(
            Mistake(
                "not normalised",
                _NOT_NORMALISED,
                variant=lambda q, k, v, bq, bk, c: _full_pass(q, k, v, c, normalise=False),
            ),
            Mistake(
                "no scaling",
                M.NO_SCALE,
                variant=lambda q, k, v, bq, bk, c: _full_pass(q, k, v, c, scale=False),
            ),
            Mistake(
                "off by one",
                M.CAUSAL_OFF_BY_ONE,
                variant=lambda q, k, v, bq, bk, c: _full_pass(q, k, v, c, shift=-1),
            ),
        ),
        forbidden=_FORBID_ATTENTION,
        memory_mb=MEMORY_MB,  # "never build the (L, S) matrix", enforced by the kernel (RLIMIT_AS)
    ),
]


# ---- predict then measure: how many tiles does a causal blockwise pass compute? ---------------
_TILES_ALL = "causal attention skips every tile wholly above the diagonal: count only tiles with a visible key"
_TILES_BLOCK_INDEX = (
    "compared block indices (key block j <= query block i), which holds only when "
    "block_q = block_k: with other block sizes some tiles the diagonal crosses are missed "
    "or extra ones counted"
)
_TILES_UNCAPPED = (
    "the last query block ends at row L - 1, not at i0 + block_q - 1: when L is not a multiple "
    "of block_q it is shorter, and may reach fewer key blocks"
)
_TILES_NO_DIAGONAL = (
    "counted only the tiles wholly below the diagonal: a tile the diagonal crosses has "
    "visible keys too, and is computed (then masked)"
)


def _tiles_cases(rng: np.random.Generator) -> list[dict]:
    def case(square: bool):
        L = int(rng.integers(64, 2049))
        S = L if square else int(rng.integers(64, 2049))
        bq, bk = (int(n) for n in rng.choice([16, 32, 64, 128], size=2, replace=False))
        return {"L": L, "S": S, "block_q": bq, "block_k": bk}

    return [
        {"L": 256, "S": 256, "block_q": 64, "block_k": 64},
        case(True),
        case(True),
        case(False),
        # the last query block is cut at L (rows 64..99): it ends before key block 6 (keys 96..111)
        # would start if it ran to row 127; shows only with S > L and block_q > block_k
        {"L": 100, "S": 200, "block_q": 64, "block_k": 16},
    ]


def _causal_tiles(L, S, block_q, block_k, rule="positions"):
    """Tiles (query block, key block) that hold at least one pair j <= i (top-left causal)."""
    n_k = -(-S // block_k)
    total = 0
    for i0 in range(0, L, block_q):
        last = min(i0 + block_q, L) - 1  # the block's last query row
        if rule == "uncapped":
            last = i0 + block_q - 1  # as if L were a multiple of block_q
        if rule in ("positions", "uncapped"):  # key blocks starting at or before `last`
            total += -(-min(S, last + 1) // block_k)
        elif rule == "block index":
            total += min(i0 // block_q + 1, n_k)
        elif rule == "below only":
            total += min((i0 + 1) // block_k, n_k)  # key blocks whose last key <= the first query
    return total


ITEMS += [
    Item(
        id="ex09_predict_causal_tiles",
        notebook=NOTEBOOK,
        function="predict_causal_tiles",
        points=1,
        task="predict: how many (block_q, block_k) tiles a causal blockwise pass computes, before counting",
        make_cases=_tiles_cases,
        shape="()",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        reference=_causal_tiles,
        mistakes=(
            Mistake(
                "every tile", _TILES_ALL, variant=lambda L, S, bq, bk: -(-L // bq) * -(-S // bk)
            ),
            Mistake(
                "block indices",
                _TILES_BLOCK_INDEX,
                variant=lambda *a: _causal_tiles(*a, rule="block index"),
            ),
            Mistake(
                "last block not cut at L",
                _TILES_UNCAPPED,
                variant=lambda *a: _causal_tiles(*a, rule="uncapped"),
            ),
            Mistake(
                "diagonal tiles skipped",
                _TILES_NO_DIAGONAL,
                variant=lambda *a: _causal_tiles(*a, rule="below only"),
            ),
        ),
        forbidden=_FORBID,
    ),
]

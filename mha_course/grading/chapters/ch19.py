"""Chapter 19's graded items: the ring's schedule, the zig-zag layout, the bytes a rank sends, and
the capstone: the merge of two partials that is safe when one is empty (log-sum-exp -inf), and one
ring step (a block's attention with its log-sum-exp, merged into the running state), driven over
whole rings (causal, zig-zag, a ring that starts on a future block) against float64 attention."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading.child.ring_driver import drive_ring  # noqa: F401 - the item's driver, for the tests
from mha_course.grading.forbidden import ATTENTION
from mha_course.grading.oracles.ring import run_ring, serve_ring
from mha_course.kernels.ring import chunk_ids
from mha_grader.items import Item, Mistake, ServiceItem

NOTEBOOK = "ex19_ring_attention"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
# Reviewed: every public function of the ring module (shard(arange(T)) gives the positions,
# ring_attention logs the bytes it sends) and the runner that drives it.
_FORBID = (
    "mha_course.kernels.ring.chunk_ids",
    "mha_course.kernels.ring.shard",
    "mha_course.kernels.ring.unshard",
    "mha_course.kernels.ring.work_per_rank",
    "mha_course.kernels.ring.ring_attention",
    "mha_course.kernels.ring_run.run_ring",
    *ATTENTION,
    # the parent's references (the staged copy the child sees has them absent)
    "mha_course.grading.chapters.ch19._full_attention",
    "mha_course.grading.chapters.ch19._merge_ref",
    "mha_course.grading.chapters.ch19._step",
)
_WRONG_DIRECTION = (
    "ring turned the wrong way: blocks move to rank + 1, so at step s rank r holds "
    "the block that started on rank (r - s) mod P"
)
_CONTIGUOUS = (
    "contiguous positions: zig-zag cuts T into 2P chunks and gives rank r chunks r and 2P - 1 - r"
)
_NOT_MIRRORED = (
    "second chunk not mirrored: rank r's second chunk is 2P - 1 - r (counted from the end), "
    "not r + P; the mirror is what gives every rank the same causal work"
)
_MIRROR_OFF_BY_ONE = "second chunk off by one: it is chunk 2P - 1 - r (rank 0 gets the last one)"
_ALL_STEPS = "P sends counted: the last step sends nothing, so P - 1 sends per rank"
_ONLY_K = "only the keys counted: every step sends a key block and a value block"


def _source_cases(rng: np.random.Generator) -> list[dict]:
    cases = [(0, 1, 4), (3, 2, 4), (1, 1, 2), (2, 0, 3)]
    for _ in range(3):  # random rings: no two students of a class share inputs
        P = int(rng.integers(3, 65))
        cases.append((int(rng.integers(0, P)), int(rng.integers(1, P)), P))
    return [{"rank": r, "step": s, "world_size": P} for r, s, P in cases]


def _source_ref(rank, step, world_size):
    return (rank - step) % world_size


def _zigzag_cases(rng: np.random.Generator) -> list[dict]:
    # (0, 3, 6) first: rank 0 of 3 tells the unmirrored second chunk (r + P = 3) from the mirror
    # off by one (2P - 2 - r = 4); with P = 2 both are chunk 2
    cases = [(0, 3, 6), (1, 4, 16), (2, 3, 12)]
    for _ in range(2):  # random layouts: no two students of a class share inputs
        P = int(rng.integers(2, 17))
        cases.append((int(rng.integers(0, P)), P, 2 * P * int(rng.integers(1, 9))))
    return [{"rank": r, "world_size": P, "T": T} for r, P, T in cases]


def _zigzag_ref(rank, world_size, T, layout="zigzag", mirror=0):
    c = T // (2 * world_size)
    if layout == "contiguous":
        return torch.arange(rank * 2 * c, (rank + 1) * 2 * c)
    first, second = chunk_ids(rank, world_size, "zigzag")
    if layout == "shifted":  # chunks r and r + P: the second half not mirrored
        second = rank + world_size
    second -= mirror
    return torch.cat(
        [torch.arange(first * c, (first + 1) * c), torch.arange(second * c, (second + 1) * c)]
    )


def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    P = int(rng.choice([2, 4, 8, 16]))  # the last case is random: no two students share inputs
    return [
        {"B": 1, "H": 32, "T": 131072, "D": 128, "P": 8, "element_size": 2},
        {"B": 2, "H": 3, "T": 32, "D": 8, "P": 4, "element_size": 8},
        {
            "B": int(rng.integers(1, 9)),
            "H": int(rng.integers(1, 65)),
            "T": P * int(rng.integers(64, 4097)),
            "D": int(rng.choice([32, 64, 128])),
            "P": P,
            "element_size": int(rng.choice([2, 4])),
        },
    ]


def _bytes_ref(B, H, T, D, P, element_size, steps_off=1, tensors=2):
    return tensors * (P - steps_off) * B * H * (T // P) * D * element_size


# ---- the capstone: the safe merge and one ring step ---------------------------------------------
_NO_MAX = (
    "exp of a log-sum-exp (or of a score) taken without the maximum subtracted first: "
    "exp(100) is inf in float32, and inf / inf is NaN"
)
_EMPTY_NAN = (
    "NaN from an empty partial: a block whose keys are all in the query's future has "
    "lse = -inf and a weight of 0; the NaN comes from a maximum of -inf (-inf - (-inf)) or "
    "from a total of 0 (0 / 0)"
)
_STATE_WRONG = (
    "a running state wrong: after some step the state (out, lse) is not the attention over the "
    "blocks given so far, though the final answer may be right (an empty block's state is "
    "out 0, lse -inf)"
)
_OWN_SCALE = (
    "scale ignored: the scores were multiplied by 1/sqrt(D), not by the step's scale argument "
    "(1/sqrt(D) in the course's rings, 1.0 in this one)"
)
_LOCAL_OFFSET = (
    "causal mask from block-local indices (0 .. L-1 against 0 .. S-1): the mask is over "
    "the GLOBAL positions q_pos, k_pos, and a block from another rank is not on the "
    "diagonal"
)


def _merge_cases(rng: np.random.Generator) -> list[dict]:
    """Case 1: large finite log-sum-exps in float32 (exp overflows without the max), no empty
    partial; then rows where one partial, the other or both are empty (lse -inf, out 0)."""
    B, H, L, Dv = 2, 2, 6, 3
    big = {
        "out_a": rng.normal(size=(B, H, L, Dv)).astype(np.float32),
        "lse_a": rng.uniform(90, 300, size=(B, H, L)).astype(np.float32),
        "out_b": rng.normal(size=(B, H, L, Dv)).astype(np.float32),
        "lse_b": rng.uniform(90, 300, size=(B, H, L)).astype(np.float32),
    }
    cases = [big]
    for dtype in (np.float64, np.float32):
        case = {
            "out_a": rng.normal(size=(B, H, L, Dv)),
            "lse_a": rng.normal(size=(B, H, L)) * 3,
            "out_b": rng.normal(size=(B, H, L, Dv)),
            "lse_b": rng.normal(size=(B, H, L)) * 3,
        }
        empty_a, empty_b = rng.random((B, H, L)) < 0.4, rng.random((B, H, L)) < 0.4
        empty_a[0, 0, :2] = empty_b[0, 0, 1:3] = True  # row 1: both empty, rows 0 and 2: one
        for side, empty in (("a", empty_a), ("b", empty_b)):
            case[f"lse_{side}"][empty] = -np.inf
            case[f"out_{side}"][empty] = 0.0
        cases.append({k: v.astype(dtype) for k, v in case.items()})
    return cases


def _merge_ref(out_a, lse_a, out_b, lse_b):
    """In float64: weights exp(lse - m) with m = max shifted to 0 where both are empty."""
    la, lb = lse_a.double(), lse_b.double()
    m = torch.maximum(la, lb)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(la - m), torch.exp(lb - m)  # (..., L)
    total = wa + wb
    out = (wa[..., None] * out_a.double() + wb[..., None] * out_b.double()) / torch.where(
        total > 0, total, torch.ones_like(total)
    )[..., None]
    return out.to(out_a.dtype), (m + torch.log(total)).to(lse_a.dtype)


def _nonfinite_where(big: bool):
    """On the float32 large-lse case (``big``): any non-finite value; on a case with empty
    partials: a NaN (an lse of -inf is right where both partials are empty)."""

    def hit(got, case):
        large = bool(np.isfinite(case["lse_a"]).all() and np.isfinite(case["lse_b"]).all())
        bad = ~np.isfinite(got) if big else np.isnan(got)
        return large == big and got.dtype.kind == "f" and bool(bad.any())

    return hit


def _ring_cases(rng: np.random.Generator) -> list[dict]:
    """Whole rings: non-causal with large scores in float32 (first: no partial is empty there),
    then causal contiguous, causal zig-zag, and a causal ring that starts one block late (rank 0
    begins with a block wholly in its future: the running state and the partial both empty)."""
    cases = []
    for P, layout, causal, late, dtype, spread in (
        (3, "contiguous", False, False, np.float32, 12.0),
        (4, "contiguous", True, False, np.float64, 1.0),
        (int(rng.integers(2, 5)), "zigzag", True, False, np.float64, 1.0),
        (3, "contiguous", True, True, np.float32, 1.0),
    ):
        n = 2 * P if layout == "zigzag" else P
        c = int(rng.integers(1, 4))  # positions per chunk
        T, B, H, D = n * c, 1, 2, int(rng.choice([4, 8]))
        q, k, v = (rng.normal(size=(B, H, T, D)) * (spread if i < 2 else 1.0) for i in range(3))
        chunks = [[r] if layout == "contiguous" else [r, 2 * P - 1 - r] for r in range(P)]
        positions = np.array(
            [np.concatenate([np.arange(i * c, (i + 1) * c) for i in ch]) for ch in chunks]
        )
        sources = np.array([[(r - s - late) % P for s in range(P)] for r in range(P)])
        cases.append(
            {
                "query": q.astype(dtype),
                "key": k.astype(dtype),
                "value": v.astype(dtype),
                "positions": positions,
                "sources": sources,
                "is_causal": causal,
                "scale": 1.0 / D**0.5,
            }
        )
    # the step is handed its scale: one ring with another than 1/sqrt(D) (a step ignoring it and
    # using 1/sqrt(D) is right for the course's own rings, and wrong here)
    cases[1]["scale"] = 1.0
    return cases


def _full_attention(query, key, value, positions, sources, is_causal, scale):
    """The oracle: float64 softmax attention over the whole sequence and its log-sum-exp."""
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) * float(scale)  # (B, H, T, T)
    if is_causal:
        T = q.shape[-2]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, -1)  # (B, H, T)
    # ... and every intermediate state right (the parent's ring checks them: oracles/ring.py)
    return (
        (torch.exp(scores - lse[..., None]) @ v).to(query.dtype),
        lse.to(query.dtype),
        torch.tensor(True),
    )


def _step(mode):
    """A ring step computed the right way (``"ok"``), with a wrong causal offset (``"local"``,
    ``"own block"``) or with 1/sqrt(D) in place of its ``scale`` (``"own scale"``)."""

    def step(out, lse, q, k, v, q_pos, k_pos, is_causal, scale):
        if mode == "own scale":
            scale = 1.0 / q.shape[-1] ** 0.5
        scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
        if is_causal:
            if mode == "local":
                q_pos, k_pos = torch.arange(len(q_pos)), torch.arange(len(k_pos))
            elif mode == "own block":
                k_pos = q_pos
            scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
        m = scores.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(scores - m)
        total = p.sum(-1, keepdim=True)
        blk = (p @ v) / torch.where(total > 0, total, torch.ones_like(total))
        return _merge_ref(out, lse, blk, (m + torch.log(total))[..., 0])

    return step


def _ring_variant(mode):
    return lambda *case: run_ring(_step(mode), *case)


def _ring_nonfinite(big: bool):
    def hit(got, case):
        return (
            (not case["is_causal"]) == big and got.dtype.kind == "f" and not np.isfinite(got).all()
        )

    return hit


ITEMS = [
    Item(
        id="ex19_ring_source",
        notebook=NOTEBOOK,
        function="ring_source",
        points=1,
        task="which rank's key/value block rank r holds at step s",
        make_cases=_source_cases,
        shape="()",
        reference=_source_ref,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake("wrong direction", _WRONG_DIRECTION, variant=lambda r, s, P: (r + s) % P),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex19_zigzag_positions",
        notebook=NOTEBOOK,
        function="zigzag_positions",
        points=1,
        task="the sequence positions rank r holds in the zig-zag layout",
        make_cases=_zigzag_cases,
        shape="(T / P,)",
        reference=_zigzag_ref,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake(
                "contiguous",
                _CONTIGUOUS,
                variant=lambda r, P, T: _zigzag_ref(r, P, T, layout="contiguous"),
            ),
            Mistake(
                "second chunk not mirrored",
                _NOT_MIRRORED,
                variant=lambda r, P, T: _zigzag_ref(r, P, T, layout="shifted"),
            ),
            Mistake(
                "mirror off by one",
                _MIRROR_OFF_BY_ONE,
                variant=lambda r, P, T: _zigzag_ref(r, P, T, mirror=1),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex19_ring_bytes",
        notebook=NOTEBOOK,
        function="ring_bytes_per_rank",
        points=1,
        task="bytes one rank sends over the whole ring (keys and values, P - 1 steps)",
        make_cases=_bytes_cases,
        shape="()",
        reference=_bytes_ref,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake("P steps", _ALL_STEPS, variant=lambda *a: _bytes_ref(*a, steps_off=0)),
            Mistake("only keys", _ONLY_K, variant=lambda *a: _bytes_ref(*a, tensors=1)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex19_safe_merge",
        notebook=NOTEBOOK,
        function="merge_safe",
        points=2,
        task="merge two partials (out, lse) over disjoint keys, safe when one or both are empty "
        "(lse = -inf: weight 0, no NaN) and on large lse (shift by the maximum before exp)",
        make_cases=_merge_cases,
        shape="out (B, H, L, Dv), lse (B, H, L)",
        reference=_merge_ref,
        mistakes=(
            Mistake("no max", _NO_MAX, matches=_nonfinite_where(big=True)),
            Mistake("empty partial", _EMPTY_NAN, matches=_nonfinite_where(big=False)),
        ),
        forbidden=_FORBID,
    ),
    ServiceItem(
        id="ex19_ring_step",
        uses=("merge_safe",),
        substitutes=(("merge_safe", _SUB + "merge_safe"),),
        notebook=NOTEBOOK,
        function="ring_step",
        points=3,
        task="one ring step: this block's causal attention (global positions) with its log-sum-exp, "
        "merged into the running (out, lse); driven over whole rings against float64 attention",
        make_cases=_ring_cases,
        shape="out (B, H, T, Dv), lse (B, H, T), every state right ()",
        reference=_full_attention,
        driver="mha_course.grading.child.drivers:drive_ring",
        rtol=1e-3,
        atol=1e-4,
        service=serve_ring,
        hidden=("key", "value"),
        mistakes=(
            Mistake("no max", _NO_MAX, matches=_ring_nonfinite(big=True)),
            Mistake("empty partial", _EMPTY_NAN, matches=_ring_nonfinite(big=False)),
            Mistake("wrong causal block offset", _LOCAL_OFFSET, variant=_ring_variant("local")),
            Mistake("wrong causal block offset", _LOCAL_OFFSET, variant=_ring_variant("own block")),
            Mistake("scale ignored", _OWN_SCALE, variant=_ring_variant("own scale")),
            # output 2, the one-bit check of every intermediate state (no variant may name it)
            Mistake(
                "a running state wrong",
                _STATE_WRONG,
                matches=lambda got, case: got.dtype == np.bool_ and got.size == 1 and not got.all(),
            ),
        ),
        forbidden=_FORBID,
    ),
]

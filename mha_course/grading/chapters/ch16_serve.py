"""Chapter 16's capstone: a paged serving loop (admission by free blocks, preemption by recompute,
prefix caching by chained block hashes with reference counts), graded on its block accounting over a
request trace (the reference scheduler, ``serving_reference``) and on the tokens it decodes with a
seeded model through its block tables, equal to dense decoding (``paged_model.PagedToyLM``): a
schedule that reads a preempted request's stale blocks or overwrites a shared prefix block keeps
its block counts and changes its tokens."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading.chapters.ch16 import _FORBID, NOTEBOOK
from mha_course.grading.child.paged_model import VOCAB, PagedToyLM
from mha_course.grading.oracles.serving_reference import serve_reference
from mha_grader.items import DriverItem, Mistake

PARTIAL_HASHED = (
    "the partial last block was hashed and shared: a partly filled block is still "
    "being written, so two requests cannot share it; only full blocks are hashed"
)
NO_PARENT = (
    "a block hashed without its parent: equal tokens after a different prefix (other keys "
    "and values) were taken for a hit; a block's hash names its whole prefix"
)
NOT_FREED = (
    "blocks not released when a request finishes: their reference counts never drop, so "
    "the pool fills up with finished requests"
)
OLDEST = (
    "preempted the oldest running request: the victim is the NEWEST (the last admitted; it "
    "loses the least work and the oldest finishes first), as in vLLM"
)
STALE = (
    "tokens of preempted requests differ from dense decoding once they resume (before, and in "
    "the other requests, they are right): the resumed request read keys/values that went with "
    "the blocks released at preemption"
)
SHARED_OVERWRITTEN = (
    "tokens differ from dense decoding in requests that share prefix blocks (the "
    "block counts are right): a shared block no longer holds the keys/values of "
    "the prefix its hash names, or a request read its prefix from the wrong place"
)
TOKENS = "tokens differ from dense decoding (greedy, the same model with no cache)"


def _pad(rows: list[list[int]]) -> np.ndarray:
    out = np.full((len(rows), max(len(r) for r in rows)), -1, np.int64)  # -1 pads
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _trace(rng: np.random.Generator, bs: int, tight: bool) -> dict:
    """Six requests: three share a system prefix (two full blocks and a token), two prompts are
    equal and end in a partial block, one starts with the tokens of another's second block."""

    def tok(k: int) -> list[int]:
        return rng.integers(0, VOCAB, size=k).tolist()

    system, block = tok(2 * bs + 1), tok(bs)
    same = system + tok(int(rng.integers(1, bs)))
    if len(same) % bs == 0:
        same += tok(1)
    prompts = [
        system + tok(int(rng.integers(1, 2 * bs))),
        same,
        tok(bs) + block,
        same,
        block + tok(int(rng.integers(1, 2 * bs))),
        system + tok(int(rng.integers(bs, 3 * bs))),
    ]
    arrivals = sorted(rng.integers(0, 3, size=6).tolist()) if tight else [0, 0, 1, 1, 2, 3]
    max_new = rng.integers(2, 3 * bs + 2, size=6)
    need = [-(-(len(p) + int(k)) // bs) for p, k in zip(prompts, max_new)]  # blocks at its longest
    return {
        "seed": 0,
        "prompts": _pad(prompts),
        "arrivals": np.array(arrivals, np.int64),
        "max_new": max_new.astype(np.int64),
        "block_size": bs,
        "num_blocks": max(need) + 2 if tight else sum(need),
        "num_steps": 400,
        "outputs": _pad([tok(int(k)) for k in max_new]),
    }  # placeholders until _decoded


def _decoded(rng: np.random.Generator, case: dict) -> dict:
    """The case with a model (its seed) and its dense greedy tokens, drawn until no step has a
    near-tie that rounding could flip; ``num_steps`` just past the last finish."""
    prompts = [[int(t) for t in row if t >= 0] for row in case["prompts"]]
    while True:
        seed = int(rng.integers(2**62))
        model = PagedToyLM(seed, case["num_blocks"], case["block_size"])
        dense = [model.dense_greedy(p, int(k)) for p, k in zip(prompts, case["max_new"])]
        if min(gap for _, gap in dense) > 1e-6:
            break
    case = {**case, "seed": seed, "num_steps": 400, "outputs": _pad([t for t, _ in dense])}
    case["num_steps"] = int(_accounting(case)[3].max()) + 3
    return case


def _accounting(case: dict, mode: str = "ok", record: dict | None = None) -> tuple:
    """The reference scheduler on a case (its tokens are the dense ones: case["outputs"])."""
    return serve_reference(
        case["prompts"],
        case["arrivals"],
        case["outputs"],
        case["block_size"],
        case["num_blocks"],
        case["num_steps"],
        mode=mode,
        record=record,
    )


def _serve_cases(rng: np.random.Generator) -> list[dict]:
    """A roomy pool (prefix sharing, finishing), then two pools small enough to preempt, each
    drawn until it preempts with a choice of victims (newest and oldest differ)."""

    def preempts(case: dict) -> bool:
        ref, old = _accounting(case), _accounting(case, "oldest preempted")
        return bool(ref[2].sum()) and not np.array_equal(ref[2], old[2])

    cases = [_decoded(rng, _trace(rng, int(rng.integers(2, 5)), tight=False))]
    while len(cases) < 3:
        for tries in range(50):  # placeholder tokens first (cheap), then the model's
            case = _trace(rng, int(rng.integers(2, 5)), tight=True)
            if preempts(case) or tries == 49:
                case = _decoded(rng, case)
                if preempts(case) or tries == 49:
                    break
        cases.append(case)
    return cases


def _serve_variant(mode):
    """(used, shared, preemptions, finish, tokens): the accounting of the reference scheduler
    (or of a known mistake) and the dense tokens (what every right schedule decodes)."""

    def run(*args):
        case = dict(
            zip(_SERVE_KEYS, (a.numpy() if isinstance(a, torch.Tensor) else a for a in args))
        )
        return (*_accounting(case, mode), case["outputs"])

    return run


_SERVE_KEYS = (
    "seed",
    "prompts",
    "arrivals",
    "max_new",
    "block_size",
    "num_blocks",
    "num_steps",
    "outputs",
)


def _wrong_rows(got: np.ndarray, case: dict) -> np.ndarray:
    """Requests whose tokens differ from dense decoding."""
    if got.shape != case["outputs"].shape:
        return np.zeros(0, np.int64)
    return np.flatnonzero((got != case["outputs"]).any(axis=1))


def _stale(got: np.ndarray, case: dict) -> bool:
    """Wrong only in preempted requests, and each right up to its first preemption."""
    record: dict = {}
    _accounting(case, record=record)
    rows = _wrong_rows(got, case)
    return len(rows) > 0 and all(
        int(r) in record
        and np.array_equal(got[r, : record[int(r)]], case["outputs"][r, : record[int(r)]])
        for r in rows
    )


def _sharers(case: dict) -> set[int]:
    """Requests whose first full block equals another request's: candidates for a prefix hit."""
    bs, firsts = (
        case["block_size"],
        [tuple(p[: case["block_size"]].tolist()) for p in case["prompts"]],
    )
    return {i for i, f in enumerate(firsts) if min(f) >= 0 and len(f) == bs and firsts.count(f) > 1}


def _shared(got: np.ndarray, case: dict) -> bool:
    rows = _wrong_rows(got, case)
    return len(rows) > 0 and set(rows.tolist()) <= _sharers(case)


ITEMS = [
    DriverItem(
        id="ex16_serve",
        notebook=NOTEBOOK,
        function="serve",
        points=4,
        task="a paged serving loop decoding with the model through its block tables: admit by free "
        "blocks, preempt the newest by recompute, share full blocks by chained hashes with "
        "reference counts; return (used, shared, preemptions, finish, tokens)",
        make_cases=_serve_cases,
        shape="used (steps,), shared (steps,), preemptions (n,), finish (n,), tokens (n, N)",
        reference=_serve_variant("ok"),
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        driver="mha_course.grading.child.drivers:drive_serve",
        hidden=("outputs",),
        mistakes=(
            Mistake(
                "partial block hashed",
                PARTIAL_HASHED,
                variant=_serve_variant("partial block hashed"),
            ),
            Mistake("hash without the parent", NO_PARENT, variant=_serve_variant("no parent")),
            Mistake("not freed on finish", NOT_FREED, variant=_serve_variant("not freed")),
            Mistake("oldest preempted", OLDEST, variant=_serve_variant("oldest preempted")),
            Mistake("stale keys after preemption", STALE, matches=_stale),
            Mistake("shared block overwritten", SHARED_OVERWRITTEN, matches=_shared),
            Mistake(
                "tokens differ", TOKENS, matches=lambda got, case: len(_wrong_rows(got, case)) > 0
            ),
        ),
        forbidden=_FORBID,
    ),
]

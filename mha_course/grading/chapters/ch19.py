"""Chapter 19's graded items: the ring's schedule, the zig-zag layout, the bytes a rank sends."""

from __future__ import annotations

import numpy as np
import torch

from mha_grader.items import Item, Mistake

from ...ring import chunk_ids

NOTEBOOK = "ex19_ring_attention"
# Reviewed: every public function of the ring module (shard(arange(T)) gives the positions,
# ring_attention logs the bytes it sends) and the runner that drives it.
_FORBID = ("mha_course.ring.chunk_ids", "mha_course.ring.shard", "mha_course.ring.unshard",
           "mha_course.ring.work_per_rank", "mha_course.ring.ring_attention",
           "mha_course.ring_run.run_ring")
_WRONG_DIRECTION = ("ring turned the wrong way: blocks move to rank + 1, so at step s rank r holds "
                    "the block that started on rank (r - s) mod P")
_CONTIGUOUS = ("contiguous positions: zig-zag cuts T into 2P chunks and gives rank r chunks r "
               "and 2P - 1 - r")
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
    cases = [(0, 2, 8), (1, 4, 16), (2, 3, 12)]
    for _ in range(2):  # random layouts: no two students of a class share inputs
        P = int(rng.integers(2, 17))
        cases.append((int(rng.integers(0, P)), P, 2 * P * int(rng.integers(1, 9))))
    return [{"rank": r, "world_size": P, "T": T} for r, P, T in cases]


def _zigzag_ref(rank, world_size, T, layout="zigzag", mirror=0):
    c = T // (2 * world_size)
    if layout == "contiguous":
        return torch.arange(rank * 2 * c, (rank + 1) * 2 * c)
    first, second = chunk_ids(rank, world_size, "zigzag")
    second -= mirror
    return torch.cat([torch.arange(first * c, (first + 1) * c),
                      torch.arange(second * c, (second + 1) * c)])


def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    P = int(rng.choice([2, 4, 8, 16]))  # the last case is random: no two students share inputs
    return [{"B": 1, "H": 32, "T": 131072, "D": 128, "P": 8, "element_size": 2},
            {"B": 2, "H": 3, "T": 32, "D": 8, "P": 4, "element_size": 8},
            {"B": int(rng.integers(1, 9)), "H": int(rng.integers(1, 65)), "T": P * int(rng.integers(64, 4097)),
             "D": int(rng.choice([32, 64, 128])), "P": P, "element_size": int(rng.choice([2, 4]))}]


def _bytes_ref(B, H, T, D, P, element_size, steps_off=1, tensors=2):
    return tensors * (P - steps_off) * B * H * (T // P) * D * element_size


ITEMS = [
    Item(
        id="ex19_ring_source", notebook=NOTEBOOK, function="ring_source", points=1,
        task="which rank's key/value block rank r holds at step s", make_cases=_source_cases,
        shape="()", reference=_source_ref, dtype_must_match=False, rtol=0.0, atol=0.5,
        mistakes=(Mistake("wrong direction", _WRONG_DIRECTION,
                          variant=lambda r, s, P: (r + s) % P),),
        forbidden=_FORBID,
    ),
    Item(
        id="ex19_zigzag_positions", notebook=NOTEBOOK, function="zigzag_positions", points=1,
        task="the sequence positions rank r holds in the zig-zag layout", make_cases=_zigzag_cases,
        shape="(T / P,)", reference=_zigzag_ref, dtype_must_match=False, rtol=0.0, atol=0.5,
        mistakes=(
            Mistake("contiguous", _CONTIGUOUS,
                    variant=lambda r, P, T: _zigzag_ref(r, P, T, layout="contiguous")),
            Mistake("mirror off by one", _MIRROR_OFF_BY_ONE,
                    variant=lambda r, P, T: _zigzag_ref(r, P, T, mirror=1)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex19_ring_bytes", notebook=NOTEBOOK, function="ring_bytes_per_rank", points=1,
        task="bytes one rank sends over the whole ring (keys and values, P - 1 steps)",
        make_cases=_bytes_cases, shape="()", reference=_bytes_ref, dtype_must_match=False,
        rtol=0.0, atol=0.5,
        mistakes=(
            Mistake("P steps", _ALL_STEPS, variant=lambda *a: _bytes_ref(*a, steps_off=0)),
            Mistake("only keys", _ONLY_K, variant=lambda *a: _bytes_ref(*a, tensors=1)),
        ),
        forbidden=_FORBID,
    ),
]

"""Chapter 16's graded items: int8 absmax quantization with per-token or per-channel scales, the
block-table lookup of a paged cache (logical position -> physical block, offset), the slots a
paged vs a preallocated cache wastes on a mix of lengths (internal fragmentation), and the
capstone, a paged serving loop, is in ``ch16_serve``."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.caches.quantized import quantize
from mha_course.paged import BlockPool, PagedKVCache, slots_needed
from mha_grader.items import Item, Mistake

NOTEBOOK = "ex16_quantized_paged_cache"
# Reviewed: the quantizer and the cache that quantizes, everything that reads or writes through a
# block table (the paged cache, paged attention, the batched step and loop), and the slot count.
# One list for the notebook, so its items share one unit.
_FORBID = (
    "mha_course.caches.quantized.quantize",
    "mha_course.caches.quantized.dequantize",
    "mha_course.caches.quantized.QuantizedKVCache",
    "mha_course.paged.tables.PagedKVCache",
    "mha_course.paged.decode.paged_attention",
    "mha_course.paged.decode.paged_forward",
    "mha_course.paged.decode.continuous_batching",
    "mha_course.paged.pool.slots_needed",
    "mha_course.grading.oracles.serving_reference.serve_reference",
)

WRONG_AXIS = (
    "scales over the wrong axis: 'token' and 'channel' swapped (a token's scale comes from "
    "its D features, a channel's from its S positions)"
)
TRUNCATED = "truncated instead of rounded: the codes are cut toward zero"
Q_MAX_128 = (
    "scale = max|x| / 127 for int8 (q_max = 2^7 - 1, symmetric [-127, 127]); with / 128 the "
    "largest value maps to 128, outside int8"
)
ZERO_GROUP = "a padded (all-zero) token divided by a zero scale: its scale is 0 or not finite"
LOGICAL_BLOCK = (
    "p // block_size is the logical block; the physical block is block_table[p // "
    "block_size] — it only looks right while the table happens to be in order"
)
OFFSET_SWAPPED = (
    "the logical block is p // block_size (looked up in the "
    "table), the offset inside it is p % block_size"
)
OFFSET_FROM_PHYSICAL = (
    "the offset is p % block_size (inside the "
    "logical block), not p - block_table[p // block_size] · block_size"
)
FLOOR = (
    "it drops a partly filled block: a sequence of l tokens needs ceil(l / bs) "
    "blocks, -(-l // bs) in integers"
)
ONE_BLOCK_TOO_MANY = "one block too many when the block size divides the length"
LONGEST = (
    "a preallocated cache reserves max_len per sequence (the budget, known before the lengths are)"
)


# ---- ex16_quantize ----------------------------------------------------------------------------
def _quant_cases(rng: np.random.Generator) -> list[dict]:
    a = rng.normal(size=(2, 2, 5, 8)).astype(np.float32)
    a[0, 1, 3] = 0.0  # a padded token: its per-token group is all zeros
    b = rng.normal(size=(1, 3, 7, 4)) * rng.uniform(0.5, 4.0, size=4)  # outlier channels
    c = rng.normal(size=(2, 1, 6, 6)).astype(np.float32) * 3.0
    return [
        {"x": a, "axis": "token"},
        {"x": b, "axis": "channel"},
        {"x": c, "axis": "channel"},
        {"x": rng.normal(size=(1, 2, 3, 16)), "axis": "token"},
    ]


def _quant_variant(mode):
    def run(x, axis):
        if mode == "wrong axis":
            return quantize(x, "channel" if axis == "token" else "token")
        amax = x.abs().amax(dim=-1 if axis == "token" else -2, keepdim=True)
        if mode == "zero group":
            scale = amax / 127
        else:
            scale = torch.where(
                amax > 0, amax / (128 if mode == "128" else 127), torch.ones_like(amax)
            )
        y = x / scale
        q = torch.trunc(y) if mode == "truncated" else torch.round(y)
        return q.clamp(-128 if mode == "128" else -127, 127).to(torch.int8), scale

    return run


def _zero_group(out: np.ndarray, case: dict) -> bool:
    """Right everywhere except in the all-zero groups, where the scale is 0 or not finite (and the
    codes, x / 0 cast to int8, may be anything)."""
    q, scale = (t.numpy() for t in quantize(torch.from_numpy(case["x"]), case["axis"]))
    ref = q if out.dtype == np.int8 else scale
    if out.shape != ref.shape:
        return False
    zero = np.broadcast_to(scale == 1.0, ref.shape) & np.broadcast_to(
        np.abs(case["x"]).max(axis=-1 if case["axis"] == "token" else -2, keepdims=True) == 0,
        ref.shape,
    )
    if not zero.any() or not np.array_equal(out[~zero], ref[~zero]):
        return False
    return out.dtype == np.int8 or bool(np.all((out[zero] == 0) | ~np.isfinite(out[zero])))


# ---- ex16_block_lookup ------------------------------------------------------------------------
def _lookup_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for bs, M, N in ((4, 10, 16), (8, 9, 24), (int(rng.integers(2, 6)), 8, 20)):  # bs <= M
        table = rng.choice(N, size=M, replace=False)  # physical blocks, in no particular order
        cases.append(
            {"block_table": table, "positions": rng.integers(0, M * bs, size=9), "block_size": bs}
        )
    return cases


def _lookup_reference(block_table, positions, bs):
    """Read each position through the package's paged cache, from a pool whose every slot holds its
    own (block, offset)."""
    N = int(block_table.max()) + 1
    pool = BlockPool(N * bs, bs, num_kv_heads=1, head_dim=2, dtype=torch.float64)
    pool.key[:, 0, :, 0] = torch.arange(N, dtype=torch.float64)[:, None]  # (N, bs): the block
    pool.key[:, 0, :, 1] = torch.arange(bs, dtype=torch.float64)[None, :]  # (N, bs): the offset
    cache = PagedKVCache(pool)
    cache.tables["seq"], cache.lengths["seq"] = block_table.tolist(), len(block_table) * bs
    key, _ = cache.gather("seq")  # (G, S, 2)
    where = key[0, positions].long()  # (N_pos, 2)
    return where[:, 0], where[:, 1]


def _lookup_variant(mode):
    def run(block_table, positions, bs):
        logical, offset = positions // bs, positions % bs
        if mode == "logical":
            return logical, offset
        if mode == "swapped":
            return block_table[offset], logical
        return block_table[logical], positions - block_table[logical] * bs

    return run


# ---- ex16_cache_waste -------------------------------------------------------------------------
def _waste_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for n, bs, max_len in ((12, 16, 2048), (7, 4, 64), (20, int(rng.choice([8, 32])), 512)):
        lengths = rng.integers(1, max_len + 1, size=n)
        lengths[:2] = [bs, 3 * bs]  # lengths that fill their last block exactly
        cases.append({"lengths": lengths, "block_size": bs, "max_len": max_len})
    return cases


def _waste_reference(lengths, bs, max_len):
    ls, used = lengths.tolist(), int(lengths.sum())
    return slots_needed(ls, bs) - used, slots_needed(ls, None, max_len) - used


def _waste_variant(mode):
    def run(lengths, bs, max_len):
        used = int(lengths.sum())
        blocks = {"floor": lengths // bs, "plus one": lengths // bs + 1}.get(
            mode, -(-lengths // bs)
        )
        reserved = len(lengths) * (int(lengths.max()) if mode == "longest" else max_len)
        return int((blocks * bs).sum()) - used, reserved - used

    return run


ITEMS = [
    Item(
        id="ex16_quantize",
        notebook=NOTEBOOK,
        function="quantize_int8",
        points=2,
        task="symmetric absmax int8: scale = max|x| / 127 per token (over D) or per channel (over S), "
        "q = round(x / scale) as int8; return (q, scale)",
        make_cases=_quant_cases,
        shape="(B, G, S, D) int8, scale (B, G, S, 1) or (B, G, 1, D)",
        reference=lambda x, axis: quantize(x, axis, bits=8),
        mistakes=(
            Mistake("scales on the wrong axis", WRONG_AXIS, variant=_quant_variant("wrong axis")),
            Mistake("truncated", TRUNCATED, variant=_quant_variant("truncated")),
            Mistake("q_max 128", Q_MAX_128, variant=_quant_variant("128")),
            Mistake("all-zero group", ZERO_GROUP, matches=_zero_group),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex16_block_lookup",
        notebook=NOTEBOOK,
        function="block_lookup",
        points=1,
        task="position p -> (block_table[p // block_size], p % block_size), one pair per position",
        make_cases=_lookup_cases,
        shape="(N,) int, (N,) int",
        reference=_lookup_reference,
        mistakes=(
            Mistake("logical block", LOGICAL_BLOCK, variant=_lookup_variant("logical")),
            Mistake("block offset confusion", OFFSET_SWAPPED, variant=_lookup_variant("swapped")),
            Mistake(
                "offset from the physical block",
                OFFSET_FROM_PHYSICAL,
                variant=_lookup_variant("from physical"),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex16_cache_waste",
        notebook=NOTEBOOK,
        function="cache_waste",
        points=1,
        task="token slots reserved but unused: paged (ceil(l / bs) · bs per sequence) and preallocated "
        "(max_len per sequence); return (paged, preallocated)",
        make_cases=_waste_cases,
        shape="(), ()",
        reference=_waste_reference,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake("floor division", FLOOR, variant=_waste_variant("floor")),
            Mistake("one block too many", ONE_BLOCK_TOO_MANY, variant=_waste_variant("plus one")),
            Mistake("preallocated to the longest", LONGEST, variant=_waste_variant("longest")),
        ),
        forbidden=_FORBID,
    ),
]

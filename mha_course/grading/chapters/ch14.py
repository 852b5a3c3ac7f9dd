"""Chapter 14's graded items: the banded (sliding-window) causal mask with attention sinks, the
ring-buffer slot of a token and the ring's update (``SlidingWindowCache``), and the cache bytes
of an interleaved local/global layout."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.caches.base import kv_cache_bytes
from mha_course.caches.window import SlidingWindowCache, layout_cache_bytes, sliding_window_mask
from mha_grader.items import Dtype, Item, Mistake

NOTEBOOK = "ex14_sliding_window_sinks"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
# Reviewed: the banded mask (chapter 14's and chapter 18's FlexAttention rule), the cache whose
# update writes the ring (and whose nbytes sizes a local layer), and every function that counts
# cache bytes. One list for the notebook (no solution needs them), so its items share one unit.
_FORBID = (
    "mha_course.caches.window.sliding_window_mask",
    "mha_course.caches.window._visible",  # its band rule, unchecked (the caches' own)
    "mha_course.caches.window.SlidingWindowCache",
    "mha_course.caches.window.layout_cache_bytes",
    "mha_course.ops.flex_masks.sliding_window",
    "mha_course.caches.base.kv_cache_bytes",
    "mha_course.caches.base.kv_cache_elements",  # kv_cache_bytes without the element size
    "mha_course.benchmark.flops.kv_bytes_per_token",
    "mha_course.benchmark.flops.decode_step_bytes",
    "mha_course.caches.quantized.quantized_cache_bytes",
)

WINDOW_TOO_WIDE = (
    "one key too many: the query at position p sees itself and the "
    "W - 1 keys before it, p - W < j <= p (not p - W <= j)"
)
WINDOW_TOO_NARROW = (
    "one key too few: the window counts the query's own "
    "position, p - W < j <= p is W keys (not p - W + 1 < j)"
)
NO_OFFSET = (
    "with L < S the queries are the LAST L positions, query i sits at "
    "p = S - L + i (the S - L tokens before it are cached)"
)
SINKS_IGNORED = "the first num_sink keys (j < num_sink) stay visible to every later query"
SINKS_NOT_CAUSAL = (
    "a sink key j < num_sink is visible only to queries at p >= j; "
    "write (j <= p) & (in window | sink), not (causal & in window) | sink"
)
SINKS_BY_ROW = (
    "a sink j < num_sink is seen from the query's POSITION p = S - L + i on (j <= p), not from "
    "its row i in the chunk: after a cache, the first rows see every sink"
)
NOT_WRAPPED = (
    "the slot is (p - num_sink) % W — without the % W the slot runs past the W slots of the ring"
)
SLOT_NOT_AFTER_SINKS = (
    "the ring starts after the sinks, token p goes to slot (p - num_sink) % W, not p % W"
)
SINK_GIVEN_SLOT = "positions p < num_sink live in the sink buffer, their slot is -1"
RING_SHIFTED = (
    "a ring writes token p into slot (p - num_sink) % W and "
    "leaves the other slots where they are (no torch.roll / cat-and-slice: that copies "
    "the whole cache every step)"
)
SINKS_IN_RING = "tokens at p < num_sink go to the sink buffer, not the ring"
POSITIONS_NOT_UPDATED = (
    "slot positions not updated: the slots written still carry their old "
    "positions (the mask reads them)"
)
NOT_CAPPED = (
    "a local layer caches min(seq_len, W + num_sink) tokens: it never holds more tokens "
    "than the sequence has"
)
ALL_LOCAL = "every global_every-th layer caches all seq_len tokens"
GLOBAL_FROM_ZERO = (
    "layer l (0-based) is global when "
    "(l + 1) % global_every == 0, so num_layers // global_every of them"
)
NO_SINKS_COUNTED = "a local layer also keeps its num_sink first tokens"
NO_FACTOR_2 = "every layer caches keys AND values"


# ---- ex14_window_mask -------------------------------------------------------------------------
def _mask_cases(rng: np.random.Generator) -> list[dict]:
    i = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    L = i(8, 21)
    S = i(30, 120)
    C = i(3, 7)
    return [
        {"L": L, "S": L, "window": i(2, 6), "num_sink": i(2, 5)},  # prefill: sinks' causality shows
        {"L": 1, "S": S, "window": i(4, 17), "num_sink": i(1, 5)},  # one decode step
        {"L": C, "S": C + i(6, 30), "window": i(3, 9), "num_sink": 0},  # a chunk after a cache
        {"L": 6, "S": 9, "window": i(9, 40), "num_sink": i(0, 3)},  # W >= S: the causal mask
        # several queries after a cache, with sinks: a sink is seen from position p >= it, not
        # from the chunk's row index (row 0 sits at p = S - L and sees every sink)
        {"L": i(2, 5), "S": i(10, 30), "window": i(2, 5), "num_sink": i(2, 4)},
    ]


def _mask_variant(lo=0, hi=0, offset=True, sinks=True, sink_causal=True, sink_by_row=False):
    """The band with one mistake: ``lo``/``hi`` shift the window's edges, and the rest."""

    def run(L, S, W, n):
        p = torch.arange(S - L if offset else 0, (S - L if offset else 0) + L)[:, None]  # (L, 1)
        j = torch.arange(S)[None, :]  # (1, S)
        band = (j > p - W - lo + hi) & (j <= p)
        sink = j < (n if sinks else 0)
        if sink_by_row:  # the sinks' causality from the row index i, not the position p
            return band | (sink & (j <= torch.arange(L)[:, None]))
        return band | (sink & (j <= p) if sink_causal else sink)

    return run


# ---- ex14_ring_slots --------------------------------------------------------------------------
def _slot_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    W1, W3 = int(rng.integers(5, 10)), int(rng.integers(3, 8))
    for W, n in (
        (W1, int(rng.integers(1, 5))),
        (int(rng.integers(8, 33)), 0),
        (W3, int(rng.integers(1, W3))),
    ):  # 0 < n < W: (p - n) % W != p % W
        cases.append(
            {
                "positions": np.sort(rng.choice(6 * W + n, size=12, replace=False)),
                "window": W,
                "num_sink": n,
            }
        )
    cases[0]["positions"][:2] = [0, cases[0]["num_sink"]]  # a sink, and the ring's first token
    return cases


def _slots_reference(positions, W, n):
    """Where the package's ring puts each position: feed it ``p + 1`` tokens and find ``p`` in
    the positions it records per slot (-1 for a sink)."""
    out = []
    for p in positions.tolist():
        if p < n:
            out.append(-1)
            continue
        cache = SlidingWindowCache(W, n)
        keys = torch.zeros(1, 1, p + 1, 1, dtype=torch.float64)  # (B, G, S, D)
        cache.update(keys, keys)
        out.append(int((cache.slot_position == p).nonzero().item()))
    return torch.tensor(out, dtype=torch.long)


# ---- ex14_ring_write --------------------------------------------------------------------------
def _ring_state(rng, B, G, W, D, n, start, dtype):
    """The ring after ``start`` tokens: positions max(n, start - W) .. start - 1 at their slots."""
    ring = np.zeros((B, G, W, D), dtype=dtype)
    slot_position = np.full(W, -1, dtype=np.int64)
    for p in range(max(n, start - W), start):
        ring[:, :, (p - n) % W] = rng.normal(size=(B, G, D))
        slot_position[(p - n) % W] = p
    return ring, slot_position


def _write_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for B, G, W, D, n, start, S_new, dtype in (
        (
            2,
            2,
            int(rng.integers(4, 9)),
            4,
            2,
            int(rng.integers(20, 60)),
            1,
            np.float32,
        ),  # decode, wrapped
        (1, 3, 6, 8, 1, int(rng.integers(9, 30)), int(rng.integers(3, 6)), np.float64),  # a chunk
        (2, 1, 5, 4, 3, 0, int(rng.integers(4, 8)), np.float32),  # prefill through the sinks
        (1, 2, 4, 2, 0, int(rng.integers(2, 9)), int(rng.integers(5, 9)), np.float64),
    ):  # S_new > W
        ring, slot_position = _ring_state(rng, B, G, W, D, n, start, dtype)
        cases.append(
            {
                "ring": ring,
                "slot_position": slot_position,
                "new": rng.normal(size=(B, G, S_new, D)).astype(dtype),
                "start": start,
                "num_sink": n,
            }
        )
    return cases


def _write_reference(ring, slot_position, new, start, n):
    """The package's update from this state (the sink buffer is not part of the answer)."""
    B, G, W, D = ring.shape
    cache = SlidingWindowCache(W, n)
    cache._allocate(ring, ring)
    cache.key, cache.value = ring.clone(), ring.clone()
    cache.slot_position, cache.length = slot_position.clone(), start
    cache.update(new, new)
    return cache.key, cache.slot_position


def _write_variant(mode):
    def run(ring, slot_position, new, start, n):
        W = ring.shape[2]
        ring, slot_position = ring.clone(), slot_position.clone()
        pos = torch.arange(start, start + new.shape[2])  # (S_new,)
        if mode == "shifted":  # the ring kept in position order, oldest first
            old = slot_position[slot_position >= 0]
            order = old.argsort()
            keep = pos >= n
            kp = torch.cat([old[order], pos[keep]])[-W:]
            kv = torch.cat([ring[:, :, slot_position >= 0][:, :, order], new[:, :, keep]], dim=2)[
                :, :, -W:
            ]
            ring[:, :, : kp.numel()], slot_position[: kp.numel()] = kv, kp
            return ring, slot_position
        keep = torch.ones_like(pos, dtype=torch.bool) if mode == "sinks in ring" else pos >= n
        idx = keep.nonzero().flatten()[-W:]
        slots = (pos[idx] - n) % W
        ring[:, :, slots] = new[:, :, idx]
        if mode != "positions not updated":
            slot_position[slots] = pos[idx]
        return ring, slot_position

    return run


# ---- ex14_layout_bytes ------------------------------------------------------------------------
def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    return [  # Gemma-3-like 5:1, Mistral-like all local, a stack whose length k does not divide
        {
            "num_layers": int(rng.choice([26, 34, 46, 62])),
            "global_every": 6,
            "window": 1024,
            "num_sink": 0,
            "num_kv_heads": int(rng.choice([4, 8, 16])),
            "head_dim": 128,
            "seq_len": int(rng.integers(8000, 128000)),
            "batch": 1,
            "dtype": Dtype("bfloat16"),
        },
        {
            "num_layers": 32,
            "global_every": 33,
            "window": 4096,
            "num_sink": int(rng.integers(1, 8)),
            "num_kv_heads": 8,
            "head_dim": 128,
            "seq_len": int(rng.integers(5000, 32000)),
            "batch": int(rng.integers(1, 5)),
            "dtype": Dtype("float16"),
        },
        {
            "num_layers": int(rng.integers(7, 30)),
            "global_every": int(rng.integers(2, 5)),
            "window": 512,
            "num_sink": 4,
            "num_kv_heads": 2,
            "head_dim": 64,
            "seq_len": int(rng.integers(100, 500)),
            "batch": 2,
            "dtype": Dtype("float32"),
        },  # seq_len < W
    ]


def _windows(num_layers, k, W, first=False):
    return [None if ((i if first else i + 1) % k == 0) else W for i in range(num_layers)]


def _bytes_reference(nl, k, W, n, G, D, seq_len, batch, dtype):
    return layout_cache_bytes(_windows(nl, k, W), G, D, seq_len, batch, dtype, num_sink=n)


def _bytes_variant(mode):
    def run(nl, k, W, n, G, D, seq_len, batch, dtype):
        total = 0
        for w in _windows(nl, k, W, first=mode == "from zero"):
            if mode == "all local":
                w = W
            keep = W + (0 if mode == "no sinks" else n)
            tokens = (
                seq_len if w is None else (keep if mode == "not capped" else min(seq_len, keep))
            )
            total += kv_cache_bytes(1, G, D, tokens, batch, dtype)
        return total // 2 if mode == "no factor 2" else total

    return run


ITEMS = [
    Item(
        id="ex14_window_mask",
        notebook=NOTEBOOK,
        function="window_mask",
        points=2,
        task="(L, S) bool: query i at p = S - L + i sees keys p - W < j <= p and the sinks j < num_sink "
        "(never j > p)",
        make_cases=_mask_cases,
        shape="(L, S) bool",
        reference=lambda L, S, W, n: sliding_window_mask(L, S, window=W, offset=S - L, num_sink=n),
        mistakes=(
            Mistake("window off by one", WINDOW_TOO_WIDE, variant=_mask_variant(lo=1)),
            Mistake("window one too narrow", WINDOW_TOO_NARROW, variant=_mask_variant(hi=1)),
            Mistake("queries not offset", NO_OFFSET, variant=_mask_variant(offset=False)),
            Mistake("sinks ignored", SINKS_IGNORED, variant=_mask_variant(sinks=False)),
            Mistake("sinks not causal", SINKS_NOT_CAUSAL, variant=_mask_variant(sink_causal=False)),
            Mistake("sinks by row", SINKS_BY_ROW, variant=_mask_variant(sink_by_row=True)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex14_ring_slots",
        notebook=NOTEBOOK,
        function="ring_slots",
        points=1,
        task="the ring slot (p - num_sink) % W of each position p (-1 for a sink p < num_sink)",
        make_cases=_slot_cases,
        shape="(N,) int",
        reference=_slots_reference,
        mistakes=(
            Mistake(
                "ring index not wrapped",
                NOT_WRAPPED,
                variant=lambda p, W, n: torch.where(p < n, -1, p - n),
            ),
            Mistake(
                "slots counted from 0",
                SLOT_NOT_AFTER_SINKS,
                variant=lambda p, W, n: torch.where(p < n, -1, p % W),
            ),
            Mistake("sink given a slot", SINK_GIVEN_SLOT, variant=lambda p, W, n: (p - n) % W),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex14_ring_write",
        uses=("ring_slots",),
        substitutes=(("ring_slots", _SUB + "ring_slots"),),
        notebook=NOTEBOOK,
        function="ring_write",
        points=2,
        task="write tokens start .. start + S_new - 1 into the ring (sinks skipped, only the last W "
        "kept); return the ring and slot_position",
        make_cases=_write_cases,
        shape="(B, G, W, D), (W,)",
        reference=_write_reference,
        mistakes=(
            Mistake("buffer shifted", RING_SHIFTED, variant=_write_variant("shifted")),
            Mistake(
                "sinks written to the ring", SINKS_IN_RING, variant=_write_variant("sinks in ring")
            ),
            Mistake(
                "slot_position not updated",
                POSITIONS_NOT_UPDATED,
                variant=_write_variant("positions not updated"),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex14_layout_bytes",
        notebook=NOTEBOOK,
        function="interleaved_cache_bytes",
        points=1,
        task="KV-cache bytes of a stack where every global_every-th layer is global (all seq_len "
        "tokens) and the others local (min(seq_len, W + num_sink) tokens)",
        make_cases=_bytes_cases,
        shape="()",
        reference=_bytes_reference,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake("local layers not capped", NOT_CAPPED, variant=_bytes_variant("not capped")),
            Mistake(
                "global layers counted as local", ALL_LOCAL, variant=_bytes_variant("all local")
            ),
            Mistake(
                "global layers from layer 0", GLOBAL_FROM_ZERO, variant=_bytes_variant("from zero")
            ),
            Mistake("sinks not counted", NO_SINKS_COUNTED, variant=_bytes_variant("no sinks")),
            Mistake("no factor 2", NO_FACTOR_2, variant=_bytes_variant("no factor 2")),
        ),
        forbidden=_FORBID,
    ),
]

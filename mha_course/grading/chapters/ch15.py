"""Chapter 15's graded items: MLA's latent cache step (the latent and the decoupled rotary key of
the new tokens, appended), the absorbed query matrix (W_UK folded into W_UQ), and KV bytes per
token of GQA and MLA from one formula."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.attention.mla import LatentKVCache, MultiHeadLatentAttention
from mha_course.caches.base import kv_cache_bytes
from mha_course.ops.rope import apply_rope
from mha_grader.items import Dtype, Item, Mistake

NOTEBOOK = "ex15_multi_head_latent_attention"
# Reviewed: the MLA module (its forward with a cache does the step; absorbed_weights folds the
# query), its cache, and every function that counts cache bytes. RoPE itself is chapter 12's and
# stays allowed. One list for the notebook, so its items share one unit.
_FORBID = (
    "mha_course.attention.mla.MultiHeadLatentAttention",
    "mha_course.attention.mla.LatentKVCache",
    "mha_course.caches.base.kv_cache_bytes",
    "mha_course.caches.base.kv_cache_elements",  # kv_cache_bytes without the element size
    "mha_course.benchmark.flops.kv_bytes_per_token",
    "mha_course.benchmark.flops.decode_step_bytes",
    "mha_course.caches.quantized.quantized_cache_bytes",
)

NOT_OFFSET = "the new tokens sit at S_old, S_old + 1, ... (after the cached ones), not at 0, 1, ..."
KEY_NOT_ROTATED = "k_R = RoPE(x W_KRᵀ) at each token's position"
ORDER = "the cached tokens come first, then the new ones (dim 1)"
ABSORB_TRANSPOSED = (
    "head h's matrix is W_UK,hᵀ W_UQ,h, shape (C, E_q) — "
    "it maps the query input to latent space; W_UQ,hᵀ W_UK,h is its transpose"
)
HEADS_STRIDED = (
    "head h owns the contiguous rows h·D .. (h+1)·D - 1 of W_UQ and "
    "W_UK (view(H, D, ...)), not rows h, h + H, ..."
)
HEADS_SUMMED = "heads summed into one (C, E_q) matrix: the head axis H is gone"
MLA_TWICE = (
    "MLA caches ONE latent shared by keys and values, C + R elements "
    "per token and layer (no factor 2)"
)
ROPE_FORGOTTEN = "MLA caches the latent (C) AND the shared rotary key (R)"
NO_FACTOR_2 = "for GQA/MHA the cache holds keys AND values, 2 · G · D"
BITS = "counted bits: the answer is 8 times the bytes"


def _w(rng: np.random.Generator, dtype, rows: int, cols: int) -> np.ndarray:
    return (rng.normal(size=(rows, cols)) / math.sqrt(cols)).astype(dtype)


# ---- ex15_latent_step -------------------------------------------------------------------------
def _step_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    # a chunk first (at one token, RoPE at position 0 is the identity: "not offset" would look
    # like "not rotated"), then one decode step and a prefill into an empty cache
    for B, L, S_old, E, C, R, dtype in (
        (1, int(rng.integers(2, 5)), int(rng.integers(1, 9)), 12, 8, 6, np.float64),
        (2, 1, int(rng.integers(3, 12)), 16, 6, 4, np.float32),
        (2, 3, 0, 8, 10, 2, np.float64),
    ):
        cases.append(
            {
                "x": rng.normal(size=(B, L, E)).astype(dtype),
                "W_DKV": _w(rng, dtype, C, E),
                "W_KR": _w(rng, dtype, R, E),
                "latent_cache": rng.normal(size=(B, S_old, C)).astype(dtype),
                "rope_cache": rng.normal(size=(B, S_old, R)).astype(dtype),
            }
        )
    return cases


def _step_reference(x, W_DKV, W_KR, latent_cache, rope_cache):
    cache = LatentKVCache()
    if latent_cache.shape[1]:
        cache.update(latent_cache, rope_cache)
    S_old, L = cache.length, x.shape[1]
    c = x @ W_DKV.T  # (B, L, E) -> (B, L, C)
    k_r = apply_rope((x @ W_KR.T)[:, None], torch.arange(S_old, S_old + L))[
        :, 0
    ]  # (B, 1, L, R) -> (B, L, R)
    return cache.update(c, k_r)


def _step_variant(offset=True, rotate=True, new_first=False):
    def run(x, W_DKV, W_KR, latent_cache, rope_cache):
        S_old, L = latent_cache.shape[1], x.shape[1]
        pos = torch.arange(S_old, S_old + L) if offset else torch.arange(L)  # (L,)
        c = x @ W_DKV.T  # (B, L, E) -> (B, L, C)
        k_r = x @ W_KR.T  # (B, L, E) -> (B, L, R)
        if rotate:
            k_r = apply_rope(k_r[:, None], pos)[:, 0]  # (B, 1, L, R) -> (B, L, R)
        pairs = (
            ((c, latent_cache), (k_r, rope_cache))
            if new_first
            else ((latent_cache, c), (rope_cache, k_r))
        )
        return tuple(torch.cat(p, dim=1) for p in pairs)

    return run


# ---- ex15_absorb_query ------------------------------------------------------------------------
def _absorb_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for H, D, C, Eq, dtype in (
        (4, 8, 6, 16, np.float32),
        (2, 5, 12, 12, np.float64),  # C = E_q
        (int(rng.integers(2, 7)), 4, 10, 7, np.float64),
    ):
        cases.append(
            {"W_UQ": _w(rng, dtype, H * D, Eq), "W_UK": _w(rng, dtype, H * D, C), "num_heads": H}
        )
    return cases


def _absorb_reference(W_UQ, W_UK, H):
    """Chapter 15's module with these weights, asked for its folded query matrix."""
    HD, Eq = W_UQ.shape
    C = W_UK.shape[
        1
    ]  # the query input E_q is a query latent here, so C may exceed it (not the width E)
    m = MultiHeadLatentAttention(
        max(Eq, C), H, latent_dim=C, head_dim=HD // H, q_latent_dim=Eq, dtype=W_UQ.dtype
    )
    with torch.no_grad():
        m.q_up.weight.copy_(W_UQ)
        m.k_up.weight.copy_(W_UK)
        return m.absorbed_weights()[0]  # (H, C, E_q)


def _absorb_variant(mode):
    def run(W_UQ, W_UK, H):
        D = W_UQ.shape[0] // H
        if mode == "strided":  # (H*D, ...) -> (D, H, ...) -> (H, D, ...)
            uq, uk = (W.view(D, H, -1).transpose(0, 1) for W in (W_UQ, W_UK))
        else:
            uq, uk = W_UQ.view(H, D, -1), W_UK.view(H, D, -1)  # (H*D, ...) -> (H, D, ...)
        if mode == "transposed":
            return uq.transpose(1, 2) @ uk  # (H, E_q, D) @ (H, D, C) -> (H, E_q, C)
        w = uk.transpose(1, 2) @ uq  # (H, C, D) @ (H, D, E_q) -> (H, C, E_q)
        return w.sum(0) if mode == "summed" else w

    return run


# ---- ex15_kv_bytes_per_token ------------------------------------------------------------------
def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    n = lambda: int(rng.integers(20, 100))  # noqa: E731
    return [  # DeepSeek-V2-like MLA, Llama-like GQA, a small MLA in float32, MHA in float16
        {
            "num_layers": n(),
            "num_kv_heads": 128,
            "head_dim": 128,
            "latent_dim": 512,
            "rope_dim": 64,
            "dtype": Dtype("bfloat16"),
        },
        {
            "num_layers": n(),
            "num_kv_heads": int(rng.choice([1, 4, 8])),
            "head_dim": 128,
            "latent_dim": None,
            "rope_dim": 0,
            "dtype": Dtype("bfloat16"),
        },
        {
            "num_layers": n(),
            "num_kv_heads": 8,
            "head_dim": 64,
            "latent_dim": int(rng.choice([64, 128, 256])),
            "rope_dim": int(rng.choice([16, 32])),
            "dtype": Dtype("float32"),
        },
        {
            "num_layers": n(),
            "num_kv_heads": 16,
            "head_dim": 64,
            "latent_dim": None,
            "rope_dim": 0,
            "dtype": Dtype("float16"),
        },
    ]


def _bytes_reference(nl, G, D, C, R, dtype):
    return kv_cache_bytes(nl, G, D, 1, 1, dtype, latent_dim=C, rope_dim=R)


def _bytes_variant(mode):
    def run(nl, G, D, C, R, dtype):
        size = torch.empty((), dtype=dtype).element_size()
        if C is None:
            per = G * D if mode == "no factor 2" else 2 * G * D
        else:
            per = {"twice": 2 * (C + R), "no rope": C}.get(mode, C + R)
        return nl * per * size * (8 if mode == "bits" else 1)

    return run


ITEMS = [
    Item(
        id="ex15_latent_step",
        notebook=NOTEBOOK,
        function="latent_cache_step",
        points=2,
        task="append the new tokens' latent c = x W_DKVᵀ and rotary key RoPE(x W_KRᵀ) (at positions "
        "S_old ..) to the cache; return both, (B, S, C) and (B, S, R)",
        make_cases=_step_cases,
        shape="(B, S, C), (B, S, R)",
        reference=_step_reference,
        mistakes=(
            Mistake("positions not offset", NOT_OFFSET, variant=_step_variant(offset=False)),
            Mistake("rotary key not rotated", KEY_NOT_ROTATED, variant=_step_variant(rotate=False)),
            Mistake("wrong order", ORDER, variant=_step_variant(new_first=True)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex15_absorb_query",
        notebook=NOTEBOOK,
        function="absorb_query",
        points=2,
        task="per head h, W_UK,hᵀ W_UQ,h (heads = contiguous row blocks of D): shape (H, C, E_q)",
        make_cases=_absorb_cases,
        shape="(H, C, E_q)",
        reference=_absorb_reference,
        mistakes=(
            Mistake(
                "absorbed projection transposed",
                ABSORB_TRANSPOSED,
                variant=_absorb_variant("transposed"),
            ),
            Mistake("heads strided", HEADS_STRIDED, variant=_absorb_variant("strided")),
            Mistake("summed over heads", HEADS_SUMMED, variant=_absorb_variant("summed")),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex15_kv_bytes_per_token",
        notebook=NOTEBOOK,
        function="kv_bytes_per_token",
        points=1,
        task="KV-cache bytes per token over all layers: 2 · G · D elements per layer (GQA/MHA, "
        "latent_dim None) or C + R (MLA), times the dtype's bytes",
        make_cases=_bytes_cases,
        shape="()",
        reference=_bytes_reference,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake("latent counted twice", MLA_TWICE, variant=_bytes_variant("twice")),
            Mistake("rotary key forgotten", ROPE_FORGOTTEN, variant=_bytes_variant("no rope")),
            Mistake("no factor 2", NO_FACTOR_2, variant=_bytes_variant("no factor 2")),
            Mistake("bits, not bytes", BITS, variant=_bytes_variant("bits")),
        ),
        forbidden=_FORBID,
    ),
]

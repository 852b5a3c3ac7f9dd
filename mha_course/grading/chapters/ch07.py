"""Chapter 7's graded items: repeating key/value heads, a GQA forward pass from given weights,
KV-cache bytes for a model config, and mean-pooling key/value heads (MHA -> GQA)."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_grader.items import Dtype, Item, Mistake

from ...gqa import mean_pool_heads
from ...mha import MultiHeadAttention, merge_heads, split_heads
from ...sdpa import repeat_kv
from .. import mistakes as M
from ..forbidden import ATTENTION

NOTEBOOK = "ex07_mqa_gqa"
_ATTENTION_FORBID = (*ATTENTION, "mha_course.gqa.mha_to_gqa")

REPEAT_ON_SEQUENCE = ("repeated along the sequence axis S instead of the head axis G: "
                      "(B, G, S, D) -> (B, G * n_rep, S, D) repeats dim 1")
HEADS_NOT_MERGED = ("heads not merged: (B, H, T, D) -> transpose -> (B, T, H * D), then "
                    "multiply by W_Oᵀ")


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


# ---- ex07_repeat_kv ---------------------------------------------------------------------------
def _repeat_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"x": _f32(rng, 2, 2, 5, 4), "n_rep": 3},
        {"x": rng.normal(size=(1, 4, 3, 8)), "n_rep": 2},
        {"x": _f32(rng, 3, 1, 4, 2), "n_rep": 4},
    ]


# ---- ex07_gqa_forward -------------------------------------------------------------------------
def _forward_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for B, T, E, H, G, f64 in ((2, 5, 16, 4, 2, False), (1, 6, 24, 6, 3, True),
                               (2, 3, 16, 8, 1, False), (1, 4, 32, 8, 4, True)):
        D = E // H
        dtype = np.float64 if f64 else np.float32

        def w(rows, cols, dtype=dtype):
            return (rng.normal(size=(rows, cols)) / math.sqrt(cols)).astype(dtype)

        cases.append({"x": rng.normal(size=(B, T, E)).astype(dtype), "W_Q": w(H * D, E),
                      "W_K": w(G * D, E), "W_V": w(G * D, E), "W_O": w(E, E),
                      "num_heads": H, "num_kv_heads": G})
    return cases


def _gqa_forward_reference(x, W_Q, W_K, W_V, W_O, H, G):
    E = x.shape[-1]
    mha = MultiHeadAttention(E, H, num_kv_heads=G, bias=False, dtype=x.dtype)
    with torch.no_grad():
        for lin, W in ((mha.q_proj, W_Q), (mha.k_proj, W_K), (mha.v_proj, W_V), (mha.out_proj, W_O)):
            lin.weight.copy_(W)
        return mha(x)[0]


def _gqa_forward_variant(x, W_Q, W_K, W_V, W_O, H, G, *, expand=repeat_kv, split=split_heads,
                         scale="sqrt_d"):
    """The forward pass with one mistake: a wrong head expansion, split or scale."""
    q = split(x @ W_Q.T, H)  # (B, T, E) -> (B, H, T, D)
    k = expand(split(x @ W_K.T, G), H // G)  # (B, T, G*D) -> (B, G, T, D) -> (B, H, T, D)
    v = expand(split(x @ W_V.T, G), H // G)  # (B, T, G*D) -> (B, G, T, D) -> (B, H, T, D)
    heads = M.attention_variant(q, k, v, scale=scale, embed_dim=x.shape[-1])  # (B, H, T, D)
    return merge_heads(heads) @ W_O.T  # (B, H, T, D) -> (B, T, E) -> (B, T, E)


# ---- ex07_kv_cache_bytes ----------------------------------------------------------------------
def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"num_layers": 32, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
         "seq_len": int(rng.integers(1000, 9000)), "batch": 1, "dtype": Dtype("bfloat16")},
        {"num_layers": 80, "num_heads": 64, "num_kv_heads": 8, "head_dim": 128,
         "seq_len": int(rng.integers(100, 2000)), "batch": 2, "dtype": Dtype("float32")},
        {"num_layers": 12, "num_heads": 12, "num_kv_heads": 4, "head_dim": 64,
         "seq_len": 2048, "batch": int(rng.integers(2, 9)), "dtype": Dtype("float16")},
        {"num_layers": 24, "num_heads": 16, "num_kv_heads": 16, "head_dim": 64,
         "seq_len": 512, "batch": 4, "dtype": Dtype("float64")},
    ]


def _bytes_reference(n_layers, H, G, D, seq_len, batch, dtype, **mistake):
    return M.kv_cache_bytes_variant(n_layers, H, G, D, seq_len, batch, dtype, **mistake)


# ---- ex07_mean_pool_kv ------------------------------------------------------------------------
def _pool_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"weight": _f32(rng, 8 * 4, 16), "num_heads": 8, "num_kv_heads": 2},
        {"weight": rng.normal(size=(6 * 3, 10)), "num_heads": 6, "num_kv_heads": 3},
        {"weight": _f32(rng, 4 * 5), "num_heads": 4, "num_kv_heads": 1},
        {"weight": rng.normal(size=(4 * 2, 6)), "num_heads": 4, "num_kv_heads": 4},
    ]


def _grouped(weight, H, G):
    """(H*D, ...) -> (G, H/G, D, ...): contiguous groups of heads."""
    return weight.reshape(G, H // G, weight.shape[0] // H, *weight.shape[1:])  # (H*D, ...) -> (G, H/G, D, ...)


def _pool_strided(weight, H, G):
    D = weight.shape[0] // H
    strided = weight.reshape(H // G, G, D, *weight.shape[1:])  # (H*D, ...) -> (H/G, G, D, ...)
    return strided.mean(dim=0).reshape(G * D, *weight.shape[1:])  # heads g, g+G, ... pooled


def _pool_not_flattened(out: np.ndarray, case: dict) -> bool:
    w, H, G = case["weight"], case["num_heads"], case["num_kv_heads"]
    return out.shape == (G, w.shape[0] // H, *w.shape[1:])


ITEMS = [
    Item(
        id="ex07_repeat_kv", notebook=NOTEBOOK, function="repeat_kv_heads", points=1,
        task="(B, G, S, D) -> (B, G * n_rep, S, D), each key/value head copied next to itself",
        make_cases=_repeat_cases, shape="(B, G * n_rep, S, D)",
        reference=lambda x, n: repeat_kv(x, n),
        mistakes=(
            Mistake("repeat", M.REPEAT_NOT_INTERLEAVE,
                    variant=lambda x, n: M.repeat_kv_with_repeat(x, n)),
            Mistake("wrong axis", REPEAT_ON_SEQUENCE,
                    variant=lambda x, n: x.repeat_interleave(n, dim=-2)),
        ),
        forbidden=("mha_course.sdpa.repeat_kv", "mha_course.gqa.kv_group_of_query_heads"),
    ),
    Item(
        id="ex07_gqa_forward", notebook=NOTEBOOK, function="gqa_forward", points=3,
        task="grouped-query self-attention from W_Q, W_K, W_V, W_O (no bias, no mask)",
        make_cases=_forward_cases, shape="(B, T, E)",
        reference=_gqa_forward_reference,
        mistakes=(
            Mistake("repeat", M.REPEAT_NOT_INTERLEAVE,
                    variant=lambda *a: _gqa_forward_variant(*a, expand=M.repeat_kv_with_repeat)),
            Mistake("split with view", M.SPLIT_WITH_VIEW,
                    variant=lambda *a: _gqa_forward_variant(*a, split=M.split_heads_with_view)),
            Mistake("scaled by sqrt(E)", M.SCALE_BY_E,
                    variant=lambda *a: _gqa_forward_variant(*a, scale="sqrt_e")),
            Mistake("no scaling", M.NO_SCALE,
                    variant=lambda *a: _gqa_forward_variant(*a, scale="none")),
            Mistake("heads not merged", HEADS_NOT_MERGED,
                    matches=lambda out, case: out.ndim == 4),
        ),
        forbidden=_ATTENTION_FORBID,
    ),
    Item(
        id="ex07_kv_cache_bytes", notebook=NOTEBOOK, function="kv_cache_size", points=1,
        task="bytes of the KV cache: 2 · n_layers · G · D · bytes_per_element · seq_len · batch",
        make_cases=_bytes_cases, shape="()", reference=_bytes_reference,
        dtype_must_match=False, rtol=0.0, atol=0.5,
        mistakes=(
            *M.kv_bytes_mistakes(_bytes_reference),
            Mistake("H instead of G, no factor 2", f"{M.H_INSTEAD_OF_G}; and {M.NO_FACTOR_2}",
                    variant=lambda *a: _bytes_reference(*a, count_query_heads=True,
                                                        keys_and_values=False)),
            Mistake("bits, not bytes", "counted bits (× 8): use dtype's bytes per element "
                    "(torch.empty((), dtype=dtype).element_size())",
                    variant=lambda *a: 8 * _bytes_reference(*a)),
        ),
        forbidden=("mha_course.gqa.kv_cache_bytes", "mha_course.gqa.kv_cache_elements",
                   "mha_course.benchmark.flops.kv_bytes_per_token",
                   "mha_course.benchmark.flops.decode_step_bytes"),
    ),
    Item(
        id="ex07_mean_pool_kv", notebook=NOTEBOOK, function="mean_pool_kv", points=2,
        task="(H * D, ...) -> (G * D, ...): each new head is the mean of its contiguous group",
        make_cases=_pool_cases, shape="(G * D, ...)",
        reference=lambda w, H, G: mean_pool_heads(w, H, G),
        mistakes=(
            Mistake("strided groups", "pooled heads g, g + G, g + 2G, ... (strided); the groups "
                    "are contiguous: key/value head g serves query heads g·H/G ... (g+1)·H/G - 1",
                    variant=_pool_strided),
            Mistake("sum", "summed the heads of a group; take the mean",
                    variant=lambda w, H, G: _grouped(w, H, G).sum(dim=1).reshape(-1, *w.shape[1:])),
            Mistake("first head", "kept the first head of each group; the conversion takes the "
                    "mean of the group's heads",
                    variant=lambda w, H, G: _grouped(w, H, G)[:, 0].reshape(-1, *w.shape[1:])),
            Mistake("not flattened", "reshape the (G, D, ...) means back to (G * D, ...)",
                    matches=_pool_not_flattened),
        ),
        forbidden=("mha_course.gqa.mean_pool_heads", "mha_course.gqa.mha_to_gqa"),
    ),
]

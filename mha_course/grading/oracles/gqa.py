"""Chapter 7's items' cases, references and mistake variants (``chapters/ch07.py`` declares the
items): repeating key/value heads, a GQA forward pass from given weights, KV-cache bytes for a
model config, mean-pooling key/value heads (MHA -> GQA), and the predict/interpret items (a GQA
layer's parameters, the config with the smallest KV cache per token)."""

from __future__ import annotations

import math

import numpy as np
import torch

from mha_course.attention.heads import merge_heads, split_heads
from mha_course.attention.mha import MultiHeadAttention
from mha_course.grading import mistakes as M
from mha_course.ops.sdpa import repeat_kv
from mha_grader.items import Dtype

REPEAT_ON_SEQUENCE = "repeated along the sequence axis S instead of the head axis G"
HEADS_NOT_MERGED = "heads not merged: the output keeps the head axis and has no output projection"


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
    for B, T, E, H, G, f64 in (
        (2, 5, 16, 4, 2, False),
        (1, 6, 24, 6, 3, True),
        (2, 3, 16, 8, 1, False),
        (1, 4, 32, 8, 4, True),
    ):
        D = E // H
        dtype = np.float64 if f64 else np.float32

        def w(rows, cols, dtype=dtype):
            return (rng.normal(size=(rows, cols)) / math.sqrt(cols)).astype(dtype)

        cases.append(
            {
                "x": rng.normal(size=(B, T, E)).astype(dtype),
                "W_Q": w(H * D, E),
                "W_K": w(G * D, E),
                "W_V": w(G * D, E),
                "W_O": w(E, E),
                "num_heads": H,
                "num_kv_heads": G,
            }
        )
    return cases


def _gqa_forward_reference(x, W_Q, W_K, W_V, W_O, H, G):
    E = x.shape[-1]
    mha = MultiHeadAttention(E, H, num_kv_heads=G, bias=False, dtype=x.dtype)
    with torch.no_grad():
        for lin, W in (
            (mha.q_proj, W_Q),
            (mha.k_proj, W_K),
            (mha.v_proj, W_V),
            (mha.out_proj, W_O),
        ):
            lin.weight.copy_(W)
        # the weights too: SDPA(enable_gqa=True) and flex_attention return the output only (issue 19, item 9)
        return mha(x, need_weights=True)  # (B, T, E), (B, H, T, T)


def _gqa_forward_variant(
    x,
    W_Q,
    W_K,
    W_V,
    W_O,
    H,
    G,
    *,
    expand=repeat_kv,
    split=split_heads,
    scale="sqrt_d",
    out_proj=True,
):
    """The forward pass with one mistake: a wrong head expansion, split or scale, or no W_O."""
    q = split(x @ W_Q.T, H)  # (B, T, E) -> (B, H, T, D)
    k = expand(split(x @ W_K.T, G), H // G)  # (B, T, G*D) -> (B, G, T, D) -> (B, H, T, D)
    v = expand(split(x @ W_V.T, G), H // G)  # (B, T, G*D) -> (B, G, T, D) -> (B, H, T, D)
    heads, weights = M.attention_variant(
        q, k, v, scale=scale, embed_dim=x.shape[-1], return_weights=True
    )  # (B, H, T, D), (B, H, T, T)
    merged = merge_heads(heads)  # (B, H, T, D) -> (B, T, E)
    return (merged @ W_O.T if out_proj else merged), weights  # (B, T, E) -> (B, T, E)


# ---- ex07_kv_cache_bytes ----------------------------------------------------------------------
def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "num_layers": 32,
            "num_heads": 32,
            "num_kv_heads": 8,
            "head_dim": 128,
            "seq_len": int(rng.integers(1000, 9000)),
            "batch": 1,
            "dtype": Dtype("bfloat16"),
        },
        {
            "num_layers": 80,
            "num_heads": 64,
            "num_kv_heads": 8,
            "head_dim": 128,
            "seq_len": int(rng.integers(100, 2000)),
            "batch": 2,
            "dtype": Dtype("float32"),
        },
        {
            "num_layers": 12,
            "num_heads": 12,
            "num_kv_heads": 4,
            "head_dim": 64,
            "seq_len": 2048,
            "batch": int(rng.integers(2, 9)),
            "dtype": Dtype("float16"),
        },
        {
            "num_layers": 24,
            "num_heads": 16,
            "num_kv_heads": 16,
            "head_dim": 64,
            "seq_len": 512,
            "batch": 4,
            "dtype": Dtype("float64"),
        },
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
    return weight.reshape(
        G, H // G, weight.shape[0] // H, *weight.shape[1:]
    )  # (H*D, ...) -> (G, H/G, D, ...)


def _pool_strided(weight, H, G):
    D = weight.shape[0] // H
    strided = weight.reshape(H // G, G, D, *weight.shape[1:])  # (H*D, ...) -> (H/G, G, D, ...)
    return strided.mean(dim=0).reshape(G * D, *weight.shape[1:])  # heads g, g+G, ... pooled


def _pool_not_flattened(out: np.ndarray, case: dict) -> bool:
    w, H, G = case["weight"], case["num_heads"], case["num_kv_heads"]
    return out.shape == (G, w.shape[0] // H, *w.shape[1:])


# ---- predict then measure: the parameters of a GQA layer --------------------------------------
GQA_PARAMS_H = (
    "counted H key/value heads: W_K and W_V are (G·D, E), only G heads wide — GQA "
    "saves parameters as well as cache"
)
GQA_PARAMS_KV_BIAS = "the key/value biases have G·D entries each (one per output feature), not E"
GQA_PARAMS_NO_W_O = "W_O forgotten: a GQA layer still has its (E, E) output projection"


def _gqa_params_cases(rng: np.random.Generator) -> list[dict]:
    cases = [{"E": 64, "num_heads": 8, "num_kv_heads": 2, "bias": False}]
    for bias in (True, True, False):
        G = int(rng.integers(1, 9))
        H = G * int(rng.integers(2, 9))
        cases.append(
            {"E": H * int(rng.integers(4, 129)), "num_heads": H, "num_kv_heads": G, "bias": bias}
        )
    return cases


def _gqa_params(E, H, G, bias, *, kv_heads=None, kv_bias=None, w_o=True):
    kv = (G if kv_heads is None else kv_heads) * (E // H)  # width of W_K and W_V: G·D
    weights = E * E * (2 if w_o else 1) + 2 * kv * E
    biases = E * (2 if w_o else 1) + 2 * (kv if kv_bias is None else kv_bias)
    return weights + (biases if bias else 0)


# ---- interpret: which config has the smallest KV cache? ---------------------------------------
_ELEMENT_DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}


def _cache_per_token(config, use_heads=2, element_size=True):
    """KV-cache bytes per token of one config row (layers, H, G, D, bytes per element)."""
    layers, H, G, D, size = (int(n) for n in config)
    heads = G if use_heads == 2 else H
    dtype = _ELEMENT_DTYPES[size] if element_size else torch.bfloat16
    from mha_course import (
        kv_cache_bytes as cache_bytes,  # the package's one formula, by its public name
    )

    return cache_bytes(layers, heads, D, dtype=dtype)


def _smallest(configs, **kw):
    return int(np.argmin([_cache_per_token(c, **kw) for c in configs]))


def _configs(rng: np.random.Generator) -> np.ndarray:
    """4-6 configs whose smallest cache is unique and differs from the two misreadings' picks."""
    while True:
        K = int(rng.integers(4, 7))
        H = rng.choice([8, 16, 32, 64], size=K)
        G = np.array(
            [int(rng.choice([g for g in (1, 2, 4, 8, 16) if h % g == 0 and g <= h])) for h in H]
        )
        configs = np.stack(
            [
                rng.integers(12, 81, size=K),
                H,
                G,
                rng.choice([64, 128], size=K),
                rng.choice([1, 2, 4], size=K),
            ],
            axis=1,
        ).astype(np.int64)
        sizes = sorted(_cache_per_token(c) for c in configs)
        truth = _smallest(configs)
        if (
            sizes[0] < sizes[1]
            and _smallest(configs, use_heads=1) != truth
            and _smallest(configs, element_size=False) != truth
        ):
            return configs

"""Chapter 8: MHA vs GQA vs MQA — prefill (compute-bound) and decode with a KV cache
(bandwidth-bound).

A decode step computes one new query per sequence against S cached keys/values: about 4·H·S·D
FLOPs but 2·G·S·D numbers read, so its arithmetic intensity is about 2·H / G FLOPs per number
(H / G per byte in bf16) — far below any GPU's ridge point. Its time is the time to *read the cache*; G key/value heads
instead of H make that read H / G times smaller, which is the whole point of GQA and MQA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mha_course.attention.mha import MultiHeadAttention
from mha_course.benchmark import labels
from mha_course.benchmark.backends import chosen_backend
from mha_course.benchmark.flops import (
    attention_flops,
    decode_step_bytes,
    kv_bytes_per_token,
    projection_flops,
)
from mha_course.benchmark.timing import time_interleaved


def kv_head_choices(H: int) -> dict[str, int]:
    """``{"MHA": H, "GQA (G=…)": H / 4 (or the largest proper divisor), "MQA": 1}``."""
    gqa = next((g for g in (H // 4, H // 2) if g > 1 and H % g == 0), None)
    out = {labels.MHA: H}
    if gqa is not None and gqa != H:
        out[labels.gqa(gqa)] = gqa
    out[labels.MQA] = 1
    return out


def decode_rows(
    B: int, H: int, D: int, contexts: list[int], device: torch.device, dtype: torch.dtype, **timing
) -> list[dict]:
    """Time one decode step's attention over caches of growing length, for MHA, GQA and MQA.

    For each context length S the three variants are timed interleaved. Each row reports
    µs per step (one new token per sequence), KV bytes per cached token, bytes read per step and
    the effective bandwidth.

    Shape:
        query: (B, H, 1, D); cached key/value: (B, G, S, D).
    """
    rows = []
    torch.manual_seed(0)
    for S in contexts:
        fns, meta = {}, {}
        for label, G in kv_head_choices(H).items():
            q = torch.randn(B, H, 1, D, device=device, dtype=dtype)
            k, v = (torch.randn(B, G, S, D, device=device, dtype=dtype) for _ in range(2))
            fns[label] = lambda q=q, k=k, v=v, G=G: F.scaled_dot_product_attention(
                q, k, v, enable_gqa=G != H
            )
            meta[label] = (G, chosen_backend(q, k, v, enable_gqa=G != H))
        timed = time_interleaved(fns, device, **timing)
        for label, r in timed.items():
            G, backend = meta[label]
            elem = torch.empty((), dtype=dtype).element_size()
            row = {
                "variant": label,
                "B": B,
                "H": H,
                "G": G,
                "D": D,
                "S": S,
                "backend": backend,
                "dtype": str(dtype).removeprefix("torch."),
                "kv_bytes_per_token": kv_bytes_per_token(G, D, elem),
                "bytes_per_step": decode_step_bytes(B, H, G, S, D, elem),
                "flops_per_step": attention_flops(B, H, 1, S, D),
            }
            row.update(r)
            if r["status"] == "ok":
                seconds = r["ms_median"] / 1e3
                row["us_per_token"] = r["ms_median"] * 1e3
                if torch.device(device).type == "cuda":  # CPU results report GFLOP/s only
                    row["gb_per_s"] = row["bytes_per_step"] / seconds / 1e9
            rows.append(row)
    return rows


def prefill_rows(
    B: int, L: int, E: int, H: int, device: torch.device, dtype: torch.dtype, **timing
) -> list[dict]:
    """Time a causal self-attention forward of the course module for MHA, GQA and MQA.

    Prefill processes L tokens at once: its attention is the same 4·B·H·L²·D / 2 FLOPs whatever
    G is (only the K/V projections shrink), so GQA/MQA barely change its time.

    Shape:
        x: (B, L, E).
    """
    torch.manual_seed(0)
    x = torch.randn(B, L, E, device=device, dtype=dtype)
    fns, heads = {}, kv_head_choices(H)
    for label, G in heads.items():
        module = MultiHeadAttention(
            E, H, num_kv_heads=G, impl="sdpa", device=device, dtype=dtype
        ).eval()
        fns[label] = lambda m=module: m(x, is_causal=True)[0]
    rows = []
    for label, r in time_interleaved(fns, device, **timing).items():
        G = heads[label]
        flops = attention_flops(B, H, L, L, E // H, causal=True) + projection_flops(
            B, L, L, E, H, G
        )
        row = {
            "variant": label,
            "B": B,
            "L": L,
            "E": E,
            "H": H,
            "G": G,
            "dtype": str(dtype).removeprefix("torch."),
            "flops": flops,
        }
        row.update(r)
        if r["status"] == "ok":
            row["gflops_per_s"] = flops / (r["ms_median"] / 1e3) / 1e9
        rows.append(row)
    return rows

"""Chapter 8: the sequence-length sweep — quadratic time, and the memory of materialised scores.

Attention's FLOPs grow as L² (every query meets every key), so on a log-log plot its time is a
line of slope 2 once L is large enough for the L² work to dominate fixed overheads. The naive
kernel also *stores* the (B, H, L, L) scores; a fused kernel (flash) does the same FLOPs without
that memory.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.benchmark import labels
from mha_course.benchmark.flops import attention_flops, scores_bytes
from mha_course.benchmark.timing import time_interleaved
from mha_course.ops.sdpa import scaled_dot_product_attention


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x): the exponent k in y ≈ c·xᵏ."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(
            f"xs, ys: expected two equal-length lists of >= 2 points, got {len(xs)} and {len(ys)}"
        )
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("xs, ys: a log-log fit needs positive values")
    slope, _ = np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)
    return float(slope)


def sweep_rows(
    B: int,
    H: int,
    D: int,
    lengths: list[int],
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = False,
    **timing,
) -> list[dict]:
    """Time causal self-attention at each L: the course's naive kernel against torch's SDPA.

    ``progress=True`` shows a progress bar over the lengths (the CLI turns it on).

    Shape:
        Q, K, V: (B, H, L, D) for each L in ``lengths``.
    """
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    rows = []
    g = torch.Generator(device="cpu").manual_seed(0)
    for L in tqdm(lengths, desc="sweep", unit="L", disable=not progress):
        q, k, v = (torch.randn(B, H, L, D, generator=g).to(device, dtype) for _ in range(3))
        fns = {
            labels.COURSE_NAIVE: lambda q=q, k=k, v=v: scaled_dot_product_attention(
                q, k, v, is_causal=True
            ),
            labels.SDPA_AUTO: lambda q=q, k=k, v=v: F.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ),
        }
        flops = attention_flops(B, H, L, L, D, causal=True)
        for name, r in time_interleaved(fns, device, **timing).items():
            row = {
                "variant": name,
                "B": B,
                "H": H,
                "L": L,
                "D": D,
                "flops": flops,
                "dtype": str(dtype).removeprefix("torch."),
                "scores_bytes": scores_bytes(B, H, L, L, q.element_size())
                if name == labels.COURSE_NAIVE
                else 0,
            }
            row.update(r)
            if r["status"] == "ok":
                row["gflops_per_s"] = flops / (r["ms_median"] / 1e3) / 1e9
            rows.append(row)
    return rows


def fitted_slopes(rows: list[dict]) -> dict[str, float | None]:
    """Per variant, the log-log slope of time against L over the upper half of the lengths
    (small L is dominated by fixed overheads, not by the L² work)."""
    slopes: dict[str, float | None] = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted(
            (r["L"], r["ms_median"])
            for r in rows
            if r["variant"] == name and r.get("status") == "ok"
        )
        upper = pts[(len(pts) - 1) // 2 :]  # 4 points -> the last 3; 2 points -> both
        slopes[name] = loglog_slope(*map(list, zip(*upper))) if len(upper) >= 2 else None
    return slopes

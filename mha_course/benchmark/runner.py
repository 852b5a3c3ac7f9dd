"""Chapter 8: one benchmark run — comparison, prefill, decode and sweep, stamped into one dict.

``mha-course bench`` calls :func:`run_benchmark`; ``--quick`` picks small shapes so the CPU run
finishes in well under a minute (CI runs it), the full run is for a maintainer's GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mha_course.benchmark.decode import decode_rows, prefill_rows
from mha_course.benchmark.peaks import percent_of_peak
from mha_course.benchmark.results import SCHEMA
from mha_course.benchmark.stamp import environment_stamp
from mha_course.benchmark.sweep import fitted_slopes, sweep_rows
from mha_course.benchmark.timing import time_interleaved
from mha_course.benchmark.variants import Problem, Variant, kernel_variants, module_variants

CPU_BANNER = (
    "CPU fallback — not comparable to GPU numbers. These are CPU timings with the thread count "
    "stated; they report GFLOP/s only (no % of peak, no GB/s) and say nothing about how the "
    "same kernels rank on a GPU."
)


@dataclass
class Config:
    """Shapes and repeat counts of one run."""

    comparison: Problem
    include_compiled: bool
    prefill: dict
    decode: dict
    sweep: dict
    timing: dict = field(default_factory=dict)


def config_for(device: torch.device, quick: bool) -> Config:
    """Small shapes for ``--quick`` (CI, CPU < 60 s), large ones for a full run."""
    if device.type == "cuda":
        bf16 = torch.bfloat16
        if quick:
            return Config(
                Problem(2, 1024, 1024, 8, dtype=bf16),
                False,
                dict(B=2, L=1024, E=1024, H=8),
                dict(B=4, H=32, D=128, contexts=[1024, 8192]),
                dict(B=1, H=8, D=128, lengths=[512, 1024, 2048, 4096]),
                dict(rounds=10, warmup=3),
            )
        return Config(
            Problem(4, 4096, 2048, 16, dtype=bf16),
            True,
            dict(B=4, L=4096, E=4096, H=32),
            dict(B=8, H=32, D=128, contexts=[1024, 2048, 4096, 8192, 16384, 32768]),
            dict(B=1, H=16, D=128, lengths=[512, 1024, 2048, 4096, 8192, 16384]),
            dict(rounds=25, warmup=5),
        )
    f32 = torch.float32
    if quick:
        return Config(
            Problem(1, 256, 256, 4, dtype=f32),
            False,
            dict(B=1, L=256, E=256, H=8),
            dict(B=1, H=8, D=64, contexts=[512, 2048, 8192]),
            dict(B=1, H=2, D=64, lengths=[128, 256, 512, 1024]),
            dict(rounds=5, warmup=2, min_block_s=0.005),
        )
    return Config(
        Problem(4, 1024, 768, 12, dtype=f32),
        True,
        dict(B=2, L=1024, E=768, H=12),
        dict(B=4, H=16, D=64, contexts=[1024, 4096, 16384]),
        dict(B=1, H=8, D=64, lengths=[256, 512, 1024, 2048, 4096]),
        dict(rounds=7, warmup=2, min_block_s=0.05),
    )


def comparison_rows(
    variants: list[Variant], device: torch.device, stamp: dict, dtype: str, timing: dict
) -> list[dict]:
    """Time all variants interleaved; add rates, memory and the error against float64."""
    timed = time_interleaved({v.name: v.fn for v in variants}, device, **timing)
    rows = []
    for v in variants:
        r = timed[v.name]
        row = {
            "variant": v.name,
            "level": v.level,
            "backend": v.backend,
            "dtype": dtype,
            "attention_flops": v.attention_flops,
            "projection_flops": v.projection_flops,
            "io_bytes": v.io_bytes,
            "scores_bytes": v.scores_bytes,
            **r,
        }
        if r["status"] == "ok":
            seconds = r["ms_median"] / 1e3
            flops = v.attention_flops + v.projection_flops
            row["gflops_per_s"] = flops / seconds / 1e9
            row["max_abs_err"] = (
                None
                if v.reference is None
                # batch element 0
                else float((v.fn()[:1].double() - v.reference).abs().max())
            )
            if device.type == "cuda":
                row["pct_of_peak"] = percent_of_peak(
                    flops, seconds, stamp["device_name"], row["dtype"]
                )
                row["gb_per_s"] = v.io_bytes / seconds / 1e9
        else:
            row["backend"] = f"{v.backend} ({r['status']})"
        rows.append(row)
    return rows


def run_benchmark(
    device: str | torch.device = "cpu",
    quick: bool = False,
    threads: int | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every section on ``device`` and return the stamped results (see ``results.py``)."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' asked for, but torch sees no CUDA device")
    if threads is not None:
        torch.set_num_threads(threads)
    cfg = config_for(device, quick)
    stamp = environment_stamp(device, threads)
    timing = dict(cfg.timing, threads=stamp["threads"])
    p = cfg.comparison
    results = {
        "schema": SCHEMA,
        "mode": "quick" if quick else "full",
        "banner": CPU_BANNER if device.type == "cpu" else None,
        "stamp": stamp,
    }
    if results["banner"]:
        log(f"*** {CPU_BANNER} ***")
    log(f"device: {stamp['device_name']} | torch {stamp['torch']} | threads {stamp['threads']}")

    with torch.inference_mode():
        log(f"comparison: {p.as_dict()}")
        variants = kernel_variants(p, device, include_compiled=cfg.include_compiled)
        variants += module_variants(p, device)
        results["comparison"] = {
            "problem": p.as_dict(),
            "rows": comparison_rows(variants, device, stamp, p.as_dict()["dtype"], timing),
        }
        log("prefill: MHA vs GQA vs MQA")
        results["prefill"] = {
            "rows": prefill_rows(**cfg.prefill, device=device, dtype=p.dtype, **timing)
        }
        log("decode: one token against a KV cache of growing length")
        results["decode"] = {
            "rows": decode_rows(**cfg.decode, device=device, dtype=p.dtype, **timing)
        }
        log("sweep: time and scores memory against sequence length")
        rows = sweep_rows(**cfg.sweep, device=device, dtype=p.dtype, progress=True, **timing)
        results["sweep"] = {"rows": rows, "slopes": fitted_slopes(rows)}
    return results

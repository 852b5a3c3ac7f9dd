"""Chapter 8: the targets the course promises, printed as measured ratios (never timed tests).

CPU (``mha-course bench --targets``): at B8 L1024 E768 H12 float32 causal, the course module
with ``impl="sdpa"`` against ``torch.nn.MultiheadAttention(need_weights=False)``, and the course's
eager kernel against a bare matmul-softmax-matmul — timed interleaved in one process.
GPU (:func:`evaluate_gpu_targets`, from a full results file): module overhead over bare SDPA plus
projections, the best backend's % of dense peak, and GQA's decode speedup against H / G.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mha_course.benchmark import labels
from mha_course.benchmark.timing import round_ratios, time_interleaved
from mha_course.benchmark.variants import Problem, kernel_variants, module_variants

CPU_TARGET_PROBLEM = Problem(B=8, L=1024, E=768, H=12, causal=True, dtype=torch.float32)
CPU_TARGETS = (
    # (what, numerator variant, denominator variant, goal: numerator / denominator <= goal)
    (
        "course MHA(impl='sdpa') / nn.MultiheadAttention(need_weights=False)",
        labels.COURSE_MODULE_SDPA,
        labels.TORCH_MHA_FAST,
        0.9,
    ),
    (
        "course eager kernel / bare matmul-softmax-matmul",
        labels.COURSE_NAIVE,
        labels.BARE_EAGER,
        1.25,
    ),
)


def ratio_row(what: str, num: dict, den: dict, goal: float) -> dict:
    """One target: the median of the per-round ratios (:func:`round_ratios`) and their quartile
    range when both results carry their rounds (one ``time_interleaved`` call); for results read
    back from a file without them, the ratio of the medians and the range from the quartiles."""
    if num.get("status") != "ok" or den.get("status") != "ok":
        return {
            "target": what,
            "goal": goal,
            "ratio": None,
            "met": None,
            "note": f"not measured: {num.get('status')}/{den.get('status')}",
        }
    if num.get("rounds_ms") and den.get("rounds_ms"):
        rr = round_ratios(num, den)
        ratio, spread, how = rr["median"], (rr["q1"], rr["q3"]), "median of per-round ratios"
    else:
        ratio = num["ms_median"] / den["ms_median"]
        spread = (num["ms_q1"] / den["ms_q3"], num["ms_q3"] / den["ms_q1"])
        how = "ratio of medians"
    return {
        "target": what,
        "goal": goal,
        "ratio": ratio,
        "ratio_range": spread,
        "ratio_of": how,
        "met": ratio <= goal,
        "numerator_ms": num["ms_median"],
        "denominator_ms": den["ms_median"],
    }


def cpu_targets(
    rounds: int = 7, threads: int | None = None, log: Callable[[str], None] = print
) -> list[dict]:
    """Measure the CPU target ratios (all four variants interleaved, one process)."""
    p = CPU_TARGET_PROBLEM
    wanted = {name for _, a, b, _ in CPU_TARGETS for name in (a, b)}
    with torch.inference_mode():
        variants = [
            v
            for v in kernel_variants(p, torch.device("cpu"), include_compiled=False)
            + module_variants(p, torch.device("cpu"))
            if v.name in wanted
        ]
        timed = time_interleaved(
            {v.name: v.fn for v in variants},
            "cpu",
            rounds=rounds,
            warmup=2,
            min_block_s=0.0,
            threads=threads,
        )
    rows = [ratio_row(what, timed[a], timed[b], goal) for what, a, b, goal in CPU_TARGETS]
    for name, r in timed.items():
        log(
            f"  {name:45s} {r.get('ms_median', float('nan')):9.1f} ms  (IQR {r.get('ms_iqr', float('nan')):.1f})"
        )
    for r in rows:
        log(
            f"  {r['target']}: {r['ratio']:.3f} ({r['ratio_of']}, quartiles {r['ratio_range'][0]:.2f}–"
            f"{r['ratio_range'][1]:.2f}), goal <= {r['goal']}: {'met' if r['met'] else 'MISSED'}"
            if r["ratio"] is not None
            else f"  {r['target']}: {r['note']}"
        )
    return rows


def _by(rows: list[dict], **match) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def evaluate_gpu_targets(results: dict) -> list[dict]:
    """The three GPU targets from a results file; ``met`` is ``None`` where they do not apply
    (CPU results, a missing row, a shape that is not the one the target names)."""
    on_gpu = results["stamp"]["device_type"] == "cuda"
    cmp_rows = results["comparison"]["rows"]
    out = [
        ratio_row(
            "course MHA(impl='sdpa') / (bare SDPA + projections)",
            _by(cmp_rows, variant=labels.COURSE_MODULE_SDPA) or {},
            _by(cmp_rows, variant=labels.BARE_SDPA_MODULE) or {},
            1.05,
        )
    ]
    if not on_gpu:  # a GPU target: on a CPU the ratio is kept for information, not judged
        out[0].update(met=None, note="GPU target; not judged on CPU")
    prob = results["comparison"]["problem"]
    kernels = [
        r
        for r in cmp_rows
        if r["variant"].startswith(labels.SDPA_FORCED_PREFIX)
        and r["status"] == "ok"
        and r.get("pct_of_peak") is not None
    ]
    applies = on_gpu and prob["dtype"] == "bfloat16" and prob["D"] == 128 and prob["L"] >= 4096
    best = max(kernels, key=lambda r: r["pct_of_peak"], default=None)
    out.append(
        {
            "target": "best SDPA backend, bf16 forward, D=128, L>=4k: % of dense peak",
            "goal": 60.0,
            "ratio": best["pct_of_peak"] if best and applies else None,
            "met": (best["pct_of_peak"] >= 60.0) if best and applies else None,
            "note": best["variant"] if best and applies else "not applicable to this run",
        }
    )
    dec = results["decode"]["rows"]
    mha = _by(dec, variant=labels.MHA, S=8192, status="ok")
    gqa = next(
        (
            r
            for r in dec
            if r["variant"].startswith(labels.GQA_PREFIX) and r["S"] == 8192 and r["status"] == "ok"
        ),
        None,
    )
    if on_gpu and mha and gqa:
        speedup, bound = mha["ms_median"] / gqa["ms_median"], mha["H"] / gqa["G"]
        out.append(
            {
                "target": "GQA decode speedup over MHA at 8k context",
                "goal": 0.8 * bound,
                "ratio": speedup,
                "met": speedup >= 0.8 * bound,
                "note": f"H/G = {bound:g}",
            }
        )
    else:
        out.append(
            {
                "target": "GQA decode speedup over MHA at 8k context",
                "goal": None,
                "ratio": None,
                "met": None,
                "note": "not applicable to this run",
            }
        )
    return out

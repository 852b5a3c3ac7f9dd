"""Chapter 9 benchmark: the course's pure-PyTorch tiled attention against torch's SDPA.

    .venv/bin/python benchmarks/tiled_vs_sdpa.py                  # L = 4096, B=1, H=8, D=64, CPU
    .venv/bin/python benchmarks/tiled_vs_sdpa.py --causal --threads 1 --blocks 128x256 256x256

Two tiled variants are timed: ``tiled`` is chapter 9's teaching version
(``mha_course.kernels.tiled.tiled_attention``, ``--blocks``) and ``fast`` the one beside it with
fewer passes per tile (``mha_course.kernels.tiled_fast.tiled_attention_fast``, ``--fast-blocks``).
Before timing, every variant's output is checked against SDPA's in float64 (to 1e-10) and in
float32 (torch's default tolerance) at the benchmark's own shapes.

Not a test: the numbers depend on the machine and on whatever else runs on it. The variants take
turns round by round (``mha_course.benchmark.timing.time_interleaved``) and the medians are
reported with their inter-quartile range; a ratio is the median of the per-round ratios. The
goal of issue 33: tiled within 1.25x of SDPA's default CPU kernel at L = 4096, causal and not.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

from mha_course.benchmark.timing import round_ratios, time_interleaved
from mha_course.kernels.tiled import tiled_attention
from mha_course.kernels.tiled_fast import tiled_attention_fast

BASELINE = "torch SDPA"  # the row every ratio is taken against


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--L", type=int, default=4096, help="sequence length (L = S)")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--blocks", nargs="+", default=["256x256"], help="block_q x block_k pairs")
    p.add_argument(
        "--fast-blocks",
        nargs="*",
        default=["256x512"],
        help="the same for the fast variant (default: 256x512, causal or not: the fastest of the "
        "pairs tried on one core of an AMD Zen 5 at L = 4096; 512x1024 was on an Intel Xeon; "
        "both listed in benchmarks/README.md)",
    )
    args = p.parse_args(argv)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)  # the checks below run with it too

    torch.manual_seed(0)
    q64, k64, v64 = (
        torch.randn(args.B, args.H, args.L, args.D, dtype=torch.float64) for _ in "qkv"
    )
    q, k, v = q64.float(), k64.float(), v64.float()
    fns = {BASELINE: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)}
    variants = [("tiled", tiled_attention, spec) for spec in args.blocks]
    variants += [("fast", tiled_attention_fast, spec) for spec in args.fast_blocks]
    for label, fn, spec in variants:
        bq, bk = (int(n) for n in spec.split("x"))
        _check(fn, (q64, k64, v64), (q, k, v), args.causal, bq, bk)  # never time a wrong answer
        fns[f"{label} {bq}x{bk}"] = lambda fn=fn, bq=bq, bk=bk: fn(
            q, k, v, is_causal=args.causal, block_q=bq, block_k=bk
        )

    load = os.getloadavg()[0]
    print(
        f"B={args.B} H={args.H} L=S={args.L} D={args.D} causal={args.causal} float32, "
        f"{threads} thread(s), {args.rounds} interleaved rounds"
    )
    results = time_interleaved(fns, "cpu", rounds=args.rounds, threads=threads, min_block_s=0.0)
    for name, r in results.items():
        if r["status"] != "ok":
            print(f"{name:>16}: {r['status']} {r['reason']}")
            continue
        rr = round_ratios(r, results[BASELINE])  # per round, then the median
        print(
            f"{name:>16}: median {r['ms_median']:9.1f} ms  IQR {r['ms_iqr']:7.1f} ms  "
            f"ratio to SDPA {rr['median']:5.2f} (per-round median; quartiles "
            f"{rr['q1']:.2f}-{rr['q3']:.2f}; goal <= 1.25)"
        )
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


def _check(fn, qkv64, qkv32, causal: bool, bq: int, bk: int) -> None:
    """``fn``'s output equals SDPA's: in float64 to 1e-10, in float32 to torch's tolerance."""
    for qkv, tol in ((qkv64, {"rtol": 1e-10, "atol": 1e-10}), (qkv32, {})):
        want = F.scaled_dot_product_attention(*qkv, is_causal=causal)
        got = fn(*qkv, is_causal=causal, block_q=bq, block_k=bk)
        torch.testing.assert_close(got, want, **tol)
    print(f"checked {fn.__name__} {bq}x{bk} against SDPA: float64 to 1e-10, float32")


if __name__ == "__main__":
    raise SystemExit(main())

"""``mha-course bench``: the chapter 8 benchmark — stamped JSON plus plots, or the target ratios."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "time attention kernels and modules honestly; write stamped JSON results and plots"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where to run (default cpu; cuda needs a GPU)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small shapes, few repeats, one CPU thread unless --threads says "
        "otherwise (CPU: under a minute; what CI runs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results JSON (default: bench_<device>_<mode>.json here); plots "
        "are written next to it as <stem>_<plot>.png",
    )
    parser.add_argument("--no-plots", action="store_true", help="write the JSON only")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU intra-op threads (default: torch's choice, stated in the results)",
    )
    parser.add_argument(
        "--targets",
        action="store_true",
        help="instead: print the CPU target ratios (B8 L1024 E768 H12 fp32 causal)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from mha_course.benchmark import run_benchmark, write_results
    from mha_course.benchmark.targets import cpu_targets, evaluate_gpu_targets

    if args.device == "cuda" and not torch.cuda.is_available():
        print("mha-course bench: --device cuda asked for, but torch sees no CUDA device")
        return 2
    if args.quick and args.device == "cpu" and args.threads is None:
        # one thread: on a shared 2-core machine two threads made the quick run bimodal (issue
        # #33 saw one "bare" median 44x faster than the same work), as other load came and went
        args.threads = 1
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.targets:
        print(
            f"CPU targets, {torch.get_num_threads()} threads, interleaved in one process "
            "(CPU fallback — not comparable to GPU numbers):"
        )
        cpu_targets(threads=args.threads)
        return 0
    results = run_benchmark(args.device, quick=args.quick, threads=args.threads)
    results["targets"] = evaluate_gpu_targets(results)
    out = args.out or Path(f"bench_{args.device}_{'quick' if args.quick else 'full'}.json")
    write_results(results, out)
    print(f"wrote {out}")
    if not args.no_plots:
        from mha_course.benchmark.plots import save_plots

        for path in save_plots(results, out.parent, out.stem):
            print(f"wrote {path}")
    _print_summary(results)
    return 0


def _print_summary(results: dict) -> None:
    unit = "% peak" if results["stamp"]["device_type"] == "cuda" else ""
    print(
        f"\n{'variant':45s} {'backend':32s} {'median ms':>10s} {'IQR ms':>8s} {'GFLOP/s':>8s} {unit}"
    )
    for r in results["comparison"]["rows"]:
        if r["status"] != "ok":
            print(f"{r['variant']:45s} {r['status'].upper()}: {r['reason'][:60]}")
            continue
        pct = f" {r['pct_of_peak']:.1f}" if r.get("pct_of_peak") is not None else ""
        print(
            f"{r['variant']:45s} {r['backend'][:32]:32s} {r['ms_median']:10.3f} {r['ms_iqr']:8.3f} "
            f"{r['gflops_per_s']:8.1f}{pct}"
        )
    for t in results.get("targets", []):
        if t["met"] is not None:
            print(
                f"target: {t['target']}: {t['ratio']:.3f} (goal {t['goal']:.3g}) "
                f"{'met' if t['met'] else 'MISSED'}"
            )

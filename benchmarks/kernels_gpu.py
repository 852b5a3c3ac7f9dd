"""Chapter 17 benchmark (GPU only): the course's Triton FlashAttention-2 kernels against torch.

    .venv/bin/python benchmarks/kernels_gpu.py --out benchmarks/results/kernels_<gpu>_<date>.json
    .venv/bin/python benchmarks/kernels_gpu.py --quick          # one small shape, a smoke run

NEVER RUN YET: this course was written without a GPU; no number from this script has been
committed. It times, forward and forward + backward, in bf16 and fp16, D = 64 and 128, L = S from
1K to 16K (B · L = 16K tokens, H = 16 heads), causal and not:

  course   - mha_course.kernels.triton_flash (compiled by Triton on the GPU; block sizes 128 x 64)
  flash    - torch SDPA restricted to SDPBackend.FLASH_ATTENTION
  cudnn    - torch SDPA restricted to SDPBackend.CUDNN_ATTENTION
  mem_eff  - torch SDPA restricted to SDPBackend.EFFICIENT_ATTENTION
  flex     - torch.compile(flex_attention) with a causal BlockMask (or none); dynamo is reset for
             every configuration (a fresh compile each, so the recompile limit is never reached)
             and a recompile-limit fallback to eager is an error, not a row timed as "compiled"

It refuses to run under TRITON_INTERPRET=1 (the interpreter would time Python, not kernels). The
course's backward uses its own tiles (``mha_course.kernels.triton_flash.backward_blocks``: smaller than the
forward's 128 x 64 at D = 128, where two accumulators and four input tiles must fit one program).

Each variant's output (and, for forward + backward, its three gradients) is first checked against
a float32 SDPA reference (atol 2e-2 in 16-bit, 5e-3 in float32); a variant that fails is dropped
from the row and says so, never timed. Then the variants
take turns (``mha_course.benchmark.timing.time_interleaved``: CUDA events, L2 flush, medians of
interleaved rounds). TFLOP/s use 4·B·H·L·S·D for the forward (halved when causal) and 2.5x that for
the backward (FlashAttention's convention); % of peak is against the datasheet dense peak of
``mha_course.benchmark.peaks``. The issue's goal: course forward >= 50 % of flash at L >= 4K,
D = 128 — printed as a verdict, not assumed.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

COURSE, FLASH = "course", "flash"  # the goal row compares these two variants


def _fresh_flex():
    """A newly compiled flex_attention for one configuration: dynamo's caches are reset first
    (one compile per configuration, the recompile limit never reached), and hitting the limit
    anyway raises instead of silently running eager FlexAttention under the compiled label."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention)


def _variants(q, k, v, causal, backward):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask

    import mha_course.kernels.triton_flash as tf

    def sdpa_with(backend):
        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    L = q.shape[-2]
    mask = (
        create_block_mask(lambda b, h, i, j: i >= j, None, None, L, L, device="cuda")
        if causal
        else None
    )
    flex = _fresh_flex()
    fwd = {
        COURSE: lambda: tf.triton_flash_attention(
            q, k, v, is_causal=causal, block_q=128, block_k=64
        ),
        FLASH: sdpa_with(SDPBackend.FLASH_ATTENTION),
        "cudnn": sdpa_with(SDPBackend.CUDNN_ATTENTION),
        "mem_eff": sdpa_with(SDPBackend.EFFICIENT_ATTENTION),
        "flex": lambda: flex(q, k, v, block_mask=mask),
    }
    if not backward:
        return fwd
    d_out = _d_out(q)

    def with_backward(f):
        def run():
            out = f()
            return (out, *torch.autograd.grad(out, (q, k, v), d_out))

        return run

    return {name: with_backward(f) for name, f in fwd.items()}


def _d_out(q):
    """The output gradient every backward variant (and the reference) receives: seeded."""
    g = torch.Generator(device=q.device).manual_seed(0)
    return torch.randn(q.shape, generator=g, device=q.device, dtype=q.dtype)


def _reference(q, k, v, causal, backward):
    """Output (and gradients) of float32 SDPA on the same inputs (torch picks a fused float32
    kernel, memory-efficient attention: O(L) memory even at L = 16K)."""
    x = [t.detach().float().requires_grad_(backward) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*x, is_causal=causal)
    if not backward:
        return (out,)
    return (out, *torch.autograd.grad(out, x, _d_out(q).float()))


def _check_variants(fns, ref, dtype) -> None:
    """Drop (and say so) every variant whose output or gradients differ from the reference."""
    tol = 5e-3 if dtype == torch.float32 else 2e-2
    for vname, f in list(fns.items()):
        try:
            got = f()
            got = got if isinstance(got, tuple) else (got,)
            for what, g, want in zip(("out", "dq", "dk", "dv"), got, ref):
                torch.testing.assert_close(
                    g.float(), want, atol=tol, rtol=tol, msg=lambda m, w=what: f"{w}: {m}"
                )
        except Exception as exc:  # unsupported backend, out of resources, or wrong values
            print(f"  {vname}: not timed ({type(exc).__name__}: {str(exc)[:160]})")
            fns.pop(vname)


def refuse_interpreter() -> str | None:
    """Why this script must not run here, or None: Triton's interpreter times Python."""
    import os

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return (
            "kernels_gpu.py: TRITON_INTERPRET is set, so Triton would run its CPU interpreter "
            "and the timings would be Python's; unset it (env -u TRITON_INTERPRET ...)"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write the results and the stamp as JSON here")
    p.add_argument("--quick", action="store_true", help="one small shape: a smoke run")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--dtypes",
        nargs="+",
        choices=("bfloat16", "float16"),
        default=None,
        help="only these dtypes (default: both; --quick: bfloat16)",
    )
    p.add_argument(
        "--head-dims",
        nargs="+",
        type=int,
        default=None,
        help="only these head dims D (default: 64 128; --quick: 64)",
    )
    p.add_argument(
        "--lengths",
        nargs="+",
        type=int,
        default=None,
        help="only these lengths L = S (default: 1024 ... 16384; --quick: 1024)",
    )
    args = p.parse_args(argv)
    why = refuse_interpreter()
    if why:
        print(why, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kernels_gpu.py: no CUDA device; nothing timed, nothing written", file=sys.stderr)
        return 1

    import mha_course.kernels.triton_flash as tf
    from mha_course.benchmark.flops import attention_flops
    from mha_course.benchmark.peaks import percent_of_peak
    from mha_course.benchmark.stamp import environment_stamp
    from mha_course.benchmark.timing import time_interleaved

    if not tf.triton_available():
        print(tf.INSTALL_HINT, file=sys.stderr)
        return 1
    name = torch.cuda.get_device_name()
    dtypes = (
        [getattr(torch, d) for d in args.dtypes]
        if args.dtypes
        else [torch.bfloat16]
        if args.quick
        else [torch.bfloat16, torch.float16]
    )
    head_dims = args.head_dims or ([64] if args.quick else [64, 128])
    lengths = args.lengths or ([1024] if args.quick else [1024, 2048, 4096, 8192, 16384])
    rows = []
    stamp = environment_stamp("cuda")

    def write(complete: bool) -> None:
        """The rows so far, stamped: written after every configuration, so a run stopped by a
        time limit still leaves what it measured (``complete`` says whether it finished)."""
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"stamp": stamp, "complete": complete, "rows": rows}, f, indent=1)

    for dtype in dtypes:
        for D in head_dims:
            for L in lengths:
                for causal in (False, True):
                    for backward in (False, True):
                        B, H = max(1, 16384 // L), 16
                        q, k, v = (
                            torch.randn(
                                B, H, L, D, device="cuda", dtype=dtype, requires_grad=backward
                            )
                            for _ in range(3)
                        )
                        fns = _variants(q, k, v, causal, backward)
                        # a wrong kernel (output or gradients) is not timed
                        _check_variants(fns, _reference(q, k, v, causal, backward), dtype)
                        res = time_interleaved(fns, device="cuda", rounds=args.rounds)
                        flops = attention_flops(B, H, L, L, D, causal) * (3.5 if backward else 1)
                        for vname, r in res.items():
                            row = dict(
                                variant=vname,
                                dtype=str(dtype).removeprefix("torch."),
                                D=D,
                                L=L,
                                B=B,
                                H=H,
                                causal=causal,
                                backward=backward,
                                **r,
                            )
                            if r.get("status") == "ok":
                                s = r["ms_median"] / 1e3
                                row["tflops"] = flops / s / 1e12
                                row["pct_peak"] = percent_of_peak(flops, s, name, dtype)
                            rows.append(row)
                            print(
                                f"{row['dtype']:>8} D={D:3} L={L:5} causal={causal!s:5} "
                                f"{'fwd+bwd' if backward else 'fwd':7} {vname:<8} "
                                + (
                                    f"{row['tflops']:7.1f} TFLOP/s"
                                    + (
                                        f" ({row['pct_peak']:.0f} % of peak)"
                                        if row["pct_peak"] is not None
                                        else ""
                                    )
                                    if "tflops" in row
                                    else r.get("status", "?")
                                ),
                                flush=True,
                            )
                        write(complete=False)
    goal = [
        (r["dtype"], r["L"], r["causal"])
        for r in rows
        if r["variant"] == COURSE and not r["backward"] and r["D"] == 128 and r["L"] >= 4096
    ]
    for dtype, L, causal in goal:
        pick = {
            r["variant"]: r.get("tflops")
            for r in rows
            if (r["dtype"], r["L"], r["causal"], r["D"], r["backward"])
            == (dtype, L, causal, 128, False)
        }
        if pick.get(COURSE) and pick.get(FLASH):
            ratio = pick[COURSE] / pick[FLASH]
            print(
                f"goal (course fwd >= 50 % of flash), {dtype} L={L} causal={causal}: "
                f"{ratio:.0%} -> {'met' if ratio >= 0.5 else 'NOT met'}"
            )
    write(complete=True)
    if args.out:
        print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Is every GPU path right? One line per path, in under 3 minutes on one GPU (small shapes).

    .venv/bin/python benchmarks/gpu_smoke.py            # what benchmarks/gpu_smoke.sh runs
    .venv/bin/python benchmarks/gpu_smoke.py --list     # the paths, without running them

Checks correctness only (no timing): torch's SDPA backends (flash, memory-efficient, cuDNN, math)
forward and backward in float16/bfloat16; the course's Triton kernels forward and backward in
float16, bfloat16 and float32 (float32 with TF32 dot products, at TF32's tolerance), MHA and GQA,
D = 64 and D = 128 (the backward's own tiles); compiled FlexAttention (causal BlockMask, fresh
compile, eager fallback an error); the KV decode benchmark's bytes line on CUDA; ring attention
over NCCL when there are two GPUs. Every reference is float64 on the CPU (the course's SDPA).
Prints ``PASS``, ``FAIL`` or ``SKIP`` and the path; exits 1 if any failed, 2 if there is no CUDA
device (nothing checked). Written without a GPU: the first run is the real check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 5e-3}  # float32: TF32 dots


def _case(B, H, G, L, S, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, G, S, D, generator=g, dtype=torch.float64) for _ in range(2))
    return q, k, v, torch.randn(B, H, L, D, generator=g, dtype=torch.float64)


def _reference(q, k, v, d_out, causal):
    """Output and gradients of the course's float64 SDPA on the CPU (GQA by enable_gqa)."""
    from mha_course import scaled_dot_product_attention

    x = [t.clone().requires_grad_() for t in (q, k, v)]
    out = scaled_dot_product_attention(*x, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return (out, *torch.autograd.grad(out, x, d_out))


def _compare(got, want, tol) -> str:
    """Largest error of each of out, dq, dk, dv against the reference, or raise."""
    errs = []
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        g = g.detach().double().cpu()
        torch.testing.assert_close(g, w, atol=tol, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")
        errs.append(f"{name} {float((g - w).abs().max()):.1e}")
    return ", ".join(errs)


def _run_on_gpu(fn, case, dtype, causal):
    q, k, v, d_out = case
    x = [t.to("cuda", dtype).requires_grad_() for t in (q, k, v)]
    out = fn(*x, causal)
    return (out, *torch.autograd.grad(out, x, d_out.to("cuda", dtype)))


def check_sdpa(backend_name: str, dtype: torch.dtype) -> str:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    case = _case(2, 4, 4, 256, 256, 64)

    def fn(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return _compare(_run_on_gpu(fn, case, dtype, True), _reference(*case, True), TOL[dtype])


def check_triton(dtype: torch.dtype, D: int, G: int) -> str:
    import mha_course.kernels.triton_flash as tf

    if tf.interpreted():
        raise RuntimeError("TRITON_INTERPRET is set: unset it to check the compiled kernels")
    case = _case(2, 4, G, 200, 173, D)  # ragged: not multiples of any tile

    def fn(q, k, v, causal):
        return tf.triton_flash_attention(q, k, v, is_causal=causal)  # default tiles, as users get

    return _compare(_run_on_gpu(fn, case, dtype, True), _reference(*case, True), TOL[dtype])


def check_flex(dtype: torch.dtype) -> str:
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.reset()
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # an eager fallback is an error
    compiled = torch.compile(flex_attention)
    case = _case(2, 4, 4, 256, 256, 64)
    mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, 256, 256, device="cuda")

    def fn(q, k, v, causal):
        return compiled(q, k, v, block_mask=mask)

    return _compare(_run_on_gpu(fn, case, dtype, True), _reference(*case, True), TOL[dtype])


def check_decode_bytes() -> str:
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "kv_cache_decode.py"),
        "--device",
        "cuda",
        "--dtype",
        "bfloat16",
        "--quick",
        "--S",
        "1024",
        "--rounds",
        "2",
    ]
    run = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if run.returncode != 0:
        raise RuntimeError(f"exit {run.returncode}: {(run.stderr or run.stdout)[-300:]}")
    lines = run.stdout.splitlines()
    header = [ln for ln in lines if "cache MiB" in ln]
    if not header:
        raise RuntimeError(f"no bytes line (header 'cache MiB') in: {run.stdout[-300:]}")
    rows = [ln for ln in lines if ln.strip().startswith("MHA")]
    if not rows:
        raise RuntimeError(f"no MHA row under the header in: {run.stdout[-300:]}")
    bw = "with GB/s" if "GB/s" in header[0] else "bandwidth unknown for this GPU (no GB/s column)"
    return f"{bw}; MHA row: {' '.join(rows[0].split())}"


def check_nccl() -> str:
    from mha_course import scaled_dot_product_attention
    from mha_course.kernels.ring_run import run_ring

    q, k, v, _ = _case(2, 3, 3, 32, 32, 16)
    jobs = [
        dict(
            query=q.float().cuda(),
            key=k.float().cuda(),
            value=v.float().cuda(),
            is_causal=True,
            layout="zigzag",
        )
    ]
    out = run_ring(jobs, 2)[0]["out"]
    ref = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
    return f"P = 2 over NCCL, max error {float((out.double() - ref).abs().max()):.1e}"


def paths() -> list[tuple[str, callable]]:
    """(name, check) for every GPU path, in the order they run."""
    out = []
    for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        for dt in (torch.float16, torch.bfloat16):
            out.append(
                (f"sdpa {b.lower()} {str(dt)[6:]} fwd+bwd", lambda b=b, dt=dt: check_sdpa(b, dt))
            )
    # MHA (G = H = 4), GQA (G = 2), MQA (G = 1) at D = 64 and the wide-head tiles at D = 128;
    # each line compiles three kernels, so the list is short enough for < 3 minutes.
    for dt, D, G in (
        (torch.float16, 64, 4),
        (torch.float16, 128, 1),
        (torch.bfloat16, 64, 2),
        (torch.bfloat16, 128, 4),
        (torch.float32, 64, 4),
        (torch.float32, 128, 2),
    ):
        out.append(
            (
                f"triton {str(dt)[6:]} D={D} G={G} fwd+bwd",
                lambda dt=dt, D=D, G=G: check_triton(dt, D, G),
            )
        )
    out.append(("flex compiled bfloat16 causal fwd+bwd", lambda: check_flex(torch.bfloat16)))
    out.append(("kv_cache_decode bytes line (cuda, bf16)", check_decode_bytes))
    out.append(("ring attention over NCCL (2 GPUs)", check_nccl))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true", help="print the paths and exit")
    p.add_argument("-k", dest="only", default=None, help="run only paths whose name contains this")
    args = p.parse_args(argv)
    todo = [(n, f) for n, f in paths() if args.only is None or args.only in n]
    if args.list:
        for name, _ in todo:
            print(name)
        return 0
    if not torch.cuda.is_available():
        for name, _ in todo:
            print(f"SKIP {name}: no CUDA device")
        return 2
    print(
        f"GPU: {torch.cuda.get_device_name()} x {torch.cuda.device_count()} | torch "
        f"{torch.__version__} | CUDA {torch.version.cuda}",
        flush=True,
    )
    failed = 0
    for name, check in todo:
        if "NCCL" in name and torch.cuda.device_count() < 2:
            print(f"SKIP {name}: {torch.cuda.device_count()} GPU (NCCL needs one per rank)")
            continue
        start = time.perf_counter()
        try:
            detail = check()
            print(f"PASS {name}: {detail} ({time.perf_counter() - start:.1f} s)", flush=True)
        except Exception as exc:  # one line per path, whatever went wrong
            unsupported = "No available kernel" in str(exc) or "not supported" in str(exc).lower()
            word = "SKIP" if unsupported and name.startswith("sdpa") else "FAIL"
            failed += word == "FAIL"
            msg = " ".join(str(exc).split())[:240]
            print(f"{word} {name}: {type(exc).__name__}: {msg}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

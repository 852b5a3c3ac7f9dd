"""The GPU scripts (benchmarks/gpu_smoke.sh, gpu_run.sh, kernels_gpu.py), checked on the CPU as far
as a CPU can: their shell syntax, their Python parts' arguments and refusals, the correctness gate
of the kernel benchmark, and gpu_run.sh running every step when one fails. What they measure needs
a GPU (the tests that would need one are not here: gpu_smoke.sh is that test)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", ["gpu_smoke.sh", "gpu_run.sh"])
def test_shell_syntax(script):
    subprocess.run(["bash", "-n", str(BENCH / script)], check=True)


def test_smoke_lists_every_gpu_path():
    smoke = _load("gpu_smoke")
    names = [n for n, _ in smoke.paths()]
    for backend in ("flash_attention", "efficient_attention", "cudnn_attention", "math"):
        assert any(n.startswith(f"sdpa {backend}") for n in names), backend
    for dtype in ("float16", "bfloat16", "float32"):
        assert any(n.startswith(f"triton {dtype}") for n in names), dtype
    assert any("D=128" in n for n in names)  # the backward's wide-head tiles
    assert any(n.startswith("flex compiled") for n in names)
    assert any("bytes line" in n for n in names) and any("NCCL" in n for n in names)
    assert smoke.main(["--list"]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the smoke run is the real thing")
def test_smoke_without_a_gpu_skips_every_path_and_says_so(capsys):
    smoke = _load("gpu_smoke")
    assert smoke.main([]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(smoke.paths()) and all(ln.startswith("SKIP") for ln in lines)


def test_kernel_benchmark_refuses_the_interpreter(monkeypatch, capsys):
    kernels = _load("kernels_gpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.main(["--quick"]) == 2
    assert "TRITON_INTERPRET" in capsys.readouterr().err


def test_kernel_benchmark_times_no_wrong_variant(capsys):
    """The gate before timing: a variant whose gradient is wrong is dropped (and said so)."""
    kernels = _load("kernels_gpu")
    ref = tuple(torch.ones(2, 3) for _ in range(4))  # out, dq, dk, dv
    wrong_dk = (*ref[:2], ref[2] + 0.1, ref[3])
    fns = {
        "right": lambda: ref,
        "wrong backward": lambda: wrong_dk,
        "fails": lambda: (_ for _ in ()).throw(RuntimeError("out of resource: shared memory")),
    }
    kernels._check_variants(fns, ref, torch.float16)
    assert list(fns) == ["right"]
    out = capsys.readouterr().out
    assert "wrong backward: not timed" in out and "dk" in out and "shared memory" in out


def test_kernel_benchmark_compiles_flex_fresh_and_forbids_the_eager_fallback():
    import torch._dynamo

    kernels = _load("kernels_gpu")
    before = torch._dynamo.config.fail_on_recompile_limit_hit
    try:
        kernels._fresh_flex()
        assert torch._dynamo.config.fail_on_recompile_limit_hit is True
    finally:
        torch._dynamo.config.fail_on_recompile_limit_hit = before


def test_gpu_run_runs_every_step_and_fails_at_the_end(tmp_path):
    """A stand-in python: the device check passes, the chapter 8 step fails; the kernel and
    decode steps still run, each step is reported, and the script exits non-zero."""
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    shutil.copy(BENCH / "gpu_run.sh", tmp_path / "benchmarks")
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in\n'
        "  -) cat > /dev/null ;;\n"
        "  -c*) echo Fake_GPU ;;\n"
        '  "-m mha_course.cli"*) echo "bench broke" >&2; exit 3 ;;\n'
        "  *kernels_gpu.py*) echo ran-kernels ;;\n"
        "  *kv_cache_decode.py*) echo ran-decode ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    run = subprocess.run(
        ["bash", str(tmp_path / "benchmarks" / "gpu_run.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": str(fake)},
        timeout=60,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    for line in (
        "== chapter 8 bench: FAILED (exit 3)",
        "ran-kernels",
        "== chapter 17 kernels: ok",
        "ran-decode",
        "== Part III decode: ok",
        "FAILED steps: chapter 8 bench",
    ):
        assert line in run.stdout, (line, run.stdout)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_decode_benchmark_passes_its_own_check_in_16_bits(dtype, capsys):
    """gpu_run.sh and gpu_smoke.sh run kv_cache_decode.py in bfloat16; its correctness check
    (every variant against its dense reference before timing) used torch's default absolute
    tolerance, 1e-5, below one ulp of these outputs, and failed in 16 bits — on the CPU too."""
    decode = _load("kv_cache_decode")
    assert (
        decode.main(
            [
                "--dtype",
                dtype,
                "--S",
                "256",
                "--B",
                "2",
                "--H",
                "4",
                "--G",
                "2",
                "--D",
                "16",
                "--window",
                "64",
                "--rounds",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out  # the paged and int8 reads against dense, per round, side by side
    assert "goals (issue 33)" in out and "paged" in out and "int8" in out

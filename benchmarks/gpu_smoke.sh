#!/usr/bin/env bash
# Before benchmarks/gpu_run.sh, when a GPU is lent: is every GPU path right? (< 3 minutes, one GPU)
#
#     bash benchmarks/gpu_smoke.sh          # PYTHON=... to use another interpreter
#
# One line per path (PASS / FAIL / SKIP): torch's SDPA backends, the course's Triton forward and
# backward in float16 / bfloat16 / float32, compiled FlexAttention, the KV decode benchmark's bytes
# line, ring attention over NCCL when there are two GPUs. Correctness only, nothing written.
# Exits 1 if a path failed, 2 without a CUDA device. TRITON_INTERPRET must be unset (the compiled
# kernels are what is checked), so it is removed here.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
unset TRITON_INTERPRET
start=$SECONDS
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 300 "$PY" benchmarks/gpu_smoke.py "$@"
rc=$?
echo "gpu_smoke: exit $rc after $((SECONDS - start)) s"
exit $rc

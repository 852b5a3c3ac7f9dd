#!/usr/bin/env bash
# Chapter 8: the one prepared GPU run. A maintainer with an NVIDIA GPU runs it once:
#
#     bash benchmarks/gpu_run.sh            # after `make setup` with a CUDA build of torch
#
# It writes benchmarks/results/gpu_<device>_<yyyymmdd>.json (stamped: device, torch/CUDA/cuDNN
# versions, date) and three PNGs next to it, prints the GPU target verdicts, and changes nothing
# else. Commit the JSON and PNGs; notebooks/08_gpu_timed_comparison.ipynb then shows them to every
# learner, labelled with that hardware and date. Set QUICK=1 for a short smoke run (not to commit).
# Run benchmarks/gpu_smoke.sh first (< 3 minutes: is every GPU path right?).
#
# Every step runs even when an earlier one fails (one broken kernel must not cost the other
# numbers); each is reported as it ends, and the script exits non-zero at the end if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
failed=()
step() {  # step NAME COMMAND...: run it, say how it ended, remember a failure
    local name=$1; shift
    echo "== $name"
    if "$@"; then echo "== $name: ok"; else echo "== $name: FAILED (exit $?)"; failed+=("$name"); fi
}

set -e  # the device check below must pass: without a GPU nothing else can run
"$PY" - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_run.sh: torch sees no CUDA device (CPU-only build, or no GPU); nothing written")
print("GPU:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
set +e

name=$("$PY" -c "import re, torch; print(re.sub(r'[^A-Za-z0-9]+', '_', torch.cuda.get_device_name()).strip('_'))")
mode=()
suffix=""
if [[ "${QUICK:-0}" == "1" ]]; then mode=(--quick); suffix="_quick"; fi
mkdir -p benchmarks/results
out="benchmarks/results/gpu_${name}_$(date -u +%Y%m%d)${suffix}.json"

step "chapter 8 bench" "$PY" -m mha_course.cli bench --device cuda ${mode[@]+"${mode[@]}"} --out "$out"

# Part III: one decode step over every KV cache (MHA/GQA/MQA/MLA/window/int8/paged), % of bandwidth
step "Part III decode" bash -c 'set -o pipefail; "$0" benchmarks/kv_cache_decode.py --device cuda --dtype bfloat16 \
    --B 8 --H 32 --G 8 --D 128 --window 4096 --S 4096 16384 65536 | tee "$1"' \
    "$PY" "${out%.json}_kv_cache_decode.txt"

# Chapter 17: the course's Triton FlashAttention-2 kernels, forward and forward+backward, against
# torch's flash / cuDNN / memory-efficient SDPA backends and compiled FlexAttention (bf16, fp16;
# D = 64, 128; L = 1K-16K), TFLOP/s and % of peak. NEVER RUN YET: written without a GPU, no
# number from it is committed. Needs Triton (a CUDA torch ships it).
kout="benchmarks/results/kernels_${name}_$(date -u +%Y%m%d)${suffix}.json"
# KERNEL_ARGS narrows the grid for a time-limited lease (e.g. "--dtypes bfloat16 --head-dims 128
# --lengths 1024 4096 16384"); the JSON is rewritten after every configuration. Run last: longest.
# shellcheck disable=SC2086
step "chapter 17 kernels" "$PY" benchmarks/kernels_gpu.py ${mode[@]+"${mode[@]}"} ${KERNEL_ARGS:-} --out "$kout"

echo
if (( ${#failed[@]} )); then
    echo "FAILED steps: ${failed[*]} (their output is above); commit only what the others wrote"
    exit 1
fi
echo "Done. Commit $out, ${out%.json}_*.png, $kout and ${out%.json}_kv_cache_decode.txt"

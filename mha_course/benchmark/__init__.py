"""Chapter 8: honest timing and the benchmark harness behind ``mha-course bench``.

One concept per module: ``flops`` (counting work), ``peaks`` (the roofline's ceilings),
``stamp`` (where and with what a number was measured), ``timing`` (warm-up, interleaving,
CUDA events, L2 flush, median and IQR), ``backends`` (forcing SDPA kernels), ``variants`` (the
side-by-side comparison), ``decode`` (MHA/GQA/MQA prefill and decode), ``sweep`` (time against
L), ``results`` (the JSON schema), ``targets`` (the ratios the course promises), ``plots``;
``memory`` (peak tensor memory of a call, chapters 9 and 19).
"""

from mha_course.benchmark.flops import (
    arithmetic_intensity,
    attention_flops,
    decode_step_bytes,
    io_bytes,
    kv_bytes_per_token,
    projection_flops,
    scores_bytes,
)
from mha_course.benchmark.peaks import lookup_peak, percent_of_peak
from mha_course.benchmark.results import (
    committed_results,
    load_results,
    validate_results,
    write_results,
)
from mha_course.benchmark.runner import CPU_BANNER, run_benchmark
from mha_course.benchmark.stamp import environment_stamp, stamp_label
from mha_course.benchmark.sweep import loglog_slope
from mha_course.benchmark.timing import classify_failure, round_ratios, summarize, time_interleaved
from mha_course.device import peak_memory_bytes

__all__ = [
    "CPU_BANNER",
    "arithmetic_intensity",
    "attention_flops",
    "classify_failure",
    "committed_results",
    "decode_step_bytes",
    "environment_stamp",
    "io_bytes",
    "kv_bytes_per_token",
    "load_results",
    "lookup_peak",
    "peak_memory_bytes",
    "loglog_slope",
    "percent_of_peak",
    "projection_flops",
    "round_ratios",
    "run_benchmark",
    "scores_bytes",
    "stamp_label",
    "summarize",
    "time_interleaved",
    "validate_results",
    "write_results",
]

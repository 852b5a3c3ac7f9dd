"""Chapter 8's graded items: attention FLOPs (causal halves them), KV bytes read per decode step,
the arithmetic intensity of a fused attention forward, a timer that uses the device's events
(judged by the parent, which serves the simulated device), and the median/IQR summary. Their
cases, references and mistake variants are :mod:`mha_course.grading.oracles.timed_comparison`'s."""

from __future__ import annotations

import torch

from mha_course.benchmark.flops import attention_flops
from mha_course.grading import mistakes as M
from mha_course.grading.oracles.timed_comparison import (  # noqa: F401 - names of ch08.py before its split
    FIRST_CALL_EXTRA_MS,
    HOST_CLOCK,
    IN_SECONDS,
    NO_WARMUP,
    ONE_PAIR,
    WARMUP_TIMED,
    _bytes_cases,
    _bytes_reference,
    _element_size,
    _flag,
    _flops_cases,
    _flops_variant,
    _intensity_cases,
    _intensity_reference,
    _intensity_variant,
    _median_iqr,
    _summary_cases,
    _summary_variant,
    _timer_cases,
    _timer_reference,
    serve_device,
)
from mha_grader.items import Item, Mistake, ServiceItem

NOTEBOOK = "ex08_gpu_timed_comparison"

ITEMS = [
    Item(
        id="ex08_attention_flops",
        notebook=NOTEBOOK,
        function="count_attention_flops",
        points=1,
        task="FLOPs of one attention forward: 4·B·H·L·S·D, halved when causal",
        make_cases=_flops_cases,
        shape="()",
        reference=attention_flops,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            Mistake(
                "causal not halved",
                "causal attention skips about half of the (L, S) pairs: "
                "halve the count when causal=True",
                variant=_flops_variant("not halved"),
            ),
            Mistake(
                "one matmul",
                "half the count: there are two matmuls (Q Kᵀ and weights · V), and "
                "a multiply-add is 2 FLOPs",
                variant=_flops_variant("one matmul"),
            ),
            Mistake(
                "L squared",
                "used L·L: the scores are (L, S); cross-attention and decode have L ≠ S",
                variant=_flops_variant("L squared"),
            ),
        ),
        forbidden=("mha_course.benchmark.flops.attention_flops",),
    ),
    Item(
        id="ex08_decode_kv_bytes",
        notebook=NOTEBOOK,
        function="decode_kv_bytes",
        points=1,
        task="bytes of K and V one decode step reads: batch · context · 2 · G · D · bytes_per_element",
        make_cases=_bytes_cases,
        shape="()",
        reference=_bytes_reference,
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        mistakes=(
            *M.kv_bytes_mistakes(_bytes_reference),
            Mistake(
                "4 bytes",
                "assumed 4 bytes per number whatever the dtype",
                variant=lambda B, H, G, D, S, dt: _bytes_reference(B, H, G, D, S, torch.float32),
            ),
        ),
        forbidden=(
            "mha_course.benchmark.flops.kv_bytes_per_token",
            "mha_course.benchmark.flops.decode_step_bytes",
            "mha_course.caches.base.kv_cache_bytes",
            "mha_course.caches.base.kv_cache_elements",
        ),
    ),
    Item(
        id="ex08_attention_intensity",
        notebook=NOTEBOOK,
        function="attention_intensity",
        points=1,
        task="FLOPs per byte of a fused attention forward: 4·B·H·L·S·D / bytes of Q, K, V and O",
        make_cases=_intensity_cases,
        shape="()",
        reference=_intensity_reference,
        dtype_must_match=False,
        rtol=1e-9,
        atol=0.0,
        mistakes=(
            Mistake(
                "reads only",
                "the output O is written too: bytes = (Q + K + V + O) · bytes_per_element",
                variant=_intensity_variant("reads only"),
            ),
            Mistake(
                "elements",
                "divided by numbers, not bytes: the dtype's element size is missing",
                variant=_intensity_variant("elements"),
            ),
            Mistake(
                "inverted",
                "bytes per FLOP: intensity is FLOPs / bytes",
                variant=_intensity_variant("inverted"),
            ),
        ),
        forbidden=(
            "mha_course.benchmark.flops.arithmetic_intensity",
            "mha_course.benchmark.flops.io_bytes",
            "mha_course.benchmark.flops.attention_flops",
        ),
    ),
    ServiceItem(
        id="ex08_time_call",
        notebook=NOTEBOOK,
        function="time_call",
        points=2,
        task="time fn `repeats` times after `warmup` untimed calls, with an event pair around each "
        "call read after a synchronize; ms per call",
        make_cases=_timer_cases,
        shape="(6,) the grader's verdict on the samples",
        reference=_timer_reference,
        driver="mha_course.grading.child.drivers:drive_timer",
        service=serve_device,
        hidden=("kernel_ms", "jitter", "seed"),
        dtype_must_match=False,
        rtol=0.0,
        atol=0.0,
        mistakes=(
            Mistake("host clock", HOST_CLOCK, matches=_flag(5, 0)),
            Mistake(
                "warm-up timed",
                WARMUP_TIMED,
                matches=lambda out, case: (
                    out.shape == (6,) and out[0] == case["repeats"] + case["warmup"]
                ),
            ),
            Mistake("seconds", IN_SECONDS, matches=_flag(3, 1)),
            Mistake("one pair of events", ONE_PAIR, matches=_flag(4, 1)),
            Mistake("no warm-up", NO_WARMUP, matches=_flag(1, 0)),
        ),
        forbidden=("mha_course.benchmark.timing.time_interleaved",),
    ),
    Item(
        id="ex08_median_iqr",
        notebook=NOTEBOOK,
        function="median_and_iqr",
        points=1,
        task="the median and the inter-quartile range (q3 - q1, linear interpolation) of timing samples",
        make_cases=_summary_cases,
        shape="() and ()",
        reference=_median_iqr,
        dtype_must_match=False,
        mistakes=(
            Mistake(
                "mean instead of median",
                "the mean: one slow run pulls it up; report the median "
                "(the middle of the sorted samples)",
                variant=_summary_variant(median="mean"),
            ),
            Mistake(
                "lower middle",
                "for an even count the median is the mean of the two middle "
                "values (torch.median returns the lower one; torch.quantile(x, 0.5) does not)",
                variant=_summary_variant(median="lower middle"),
            ),
            Mistake(
                "not sorted",
                "took the middle sample without sorting the samples first",
                variant=_summary_variant(median="unsorted"),
            ),
            Mistake(
                "standard deviation",
                "the standard deviation, not the IQR: q3 - q1 (the middle "
                "half of the runs), which one slow run does not move",
                variant=_summary_variant(spread="std"),
            ),
            Mistake(
                "range",
                "max - min, not the IQR: q3 - q1, which ignores the slowest and fastest quarter",
                variant=_summary_variant(spread="range"),
            ),
            Mistake(
                "exclusive quartiles",
                "quartiles by the 'exclusive' method (statistics.quantiles' "
                "default), not by linear interpolation",
                variant=_summary_variant(spread="exclusive"),
            ),
        ),
        forbidden=("mha_course.benchmark.timing.summarize",),
    ),
]

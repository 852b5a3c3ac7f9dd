"""Chapter 8's graded items: attention FLOPs (causal halves them), KV bytes read per decode step,
the arithmetic intensity of a fused attention forward, a timer that uses the device's events
(judged by the parent, which serves the simulated device), and the median/IQR summary."""

from __future__ import annotations

import statistics

import numpy as np
import torch

from mha_course.benchmark.flops import attention_flops, io_bytes
from mha_course.benchmark.timing import summarize
from mha_course.grading import mistakes as M
from mha_course.grading.child.served_device import DeviceService
from mha_grader.items import Dtype, Item, Mistake, ServiceItem

NOTEBOOK = "ex08_gpu_timed_comparison"
FIRST_CALL_EXTRA_MS = 500.0  # the simulated device's first call also pays this "set-up" cost


def _element_size(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---- ex08_attention_flops ---------------------------------------------------------------------
def _flops_cases(rng: np.random.Generator) -> list[dict]:
    def n(lo, hi):
        return int(rng.integers(lo, hi))

    return [
        {
            "B": n(1, 5),
            "H": n(2, 17),
            "L": n(100, 5000),
            "S": n(100, 5000),
            "D": 64,
            "causal": False,
        },
        {"B": n(1, 5), "H": 32, "L": 4096, "S": 4096, "D": 128, "causal": True},
        {"B": 1, "H": n(2, 33), "L": 1, "S": n(1000, 9000), "D": 128, "causal": False},
        {"B": n(2, 9), "H": 12, "L": n(64, 2048), "S": n(64, 2048), "D": 64, "causal": True},
    ]


def _flops_variant(mistake: str):
    def run(B, H, L, S, D, causal):
        if mistake == "not halved":
            return 4 * B * H * L * S * D
        if mistake == "one matmul":
            return attention_flops(B, H, L, S, D, causal) // 2
        if mistake == "L squared":
            return attention_flops(B, H, L, L, D, causal)
        raise ValueError(mistake)

    return run


# ---- ex08_decode_kv_bytes ---------------------------------------------------------------------
def _bytes_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "batch": 1,
            "num_heads": 32,
            "num_kv_heads": 8,
            "head_dim": 128,
            "context": int(rng.integers(1000, 9000)),
            "dtype": Dtype("bfloat16"),
        },
        {
            "batch": int(rng.integers(2, 9)),
            "num_heads": 64,
            "num_kv_heads": 8,
            "head_dim": 128,
            "context": int(rng.integers(100, 4000)),
            "dtype": Dtype("float16"),
        },
        {
            "batch": 2,
            "num_heads": 12,
            "num_kv_heads": 4,
            "head_dim": 64,
            "context": int(rng.integers(10, 500)),
            "dtype": Dtype("float64"),
        },
        {
            "batch": 3,
            "num_heads": 16,
            "num_kv_heads": 1,
            "head_dim": 64,
            "context": 2048,
            "dtype": Dtype("float32"),
        },
    ]


def _bytes_reference(B, H, G, D, S, dtype, **mistake):
    return M.kv_cache_bytes_variant(1, H, G, D, S, B, dtype, **mistake)  # one layer's K and V


# ---- ex08_attention_intensity -----------------------------------------------------------------
def _intensity_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"B": 1, "H": 32, "L": 4096, "S": 4096, "D": 128, "dtype": Dtype("bfloat16")},
        {
            "B": int(rng.integers(1, 9)),
            "H": 32,
            "L": 1,
            "S": int(rng.integers(1000, 9000)),
            "D": 128,
            "dtype": Dtype("bfloat16"),
        },
        {
            "B": 2,
            "H": int(rng.integers(2, 17)),
            "L": int(rng.integers(64, 1024)),
            "S": 512,
            "D": 64,
            "dtype": Dtype("float32"),
        },
    ]


def _intensity_reference(B, H, L, S, D, dtype):
    return attention_flops(B, H, L, S, D) / io_bytes(
        B, H, L, S, D, element_size=_element_size(dtype)
    )


def _intensity_variant(mistake: str):
    def run(B, H, L, S, D, dtype):
        flops, elem = attention_flops(B, H, L, S, D), _element_size(dtype)
        if mistake == "reads only":
            return flops / ((B * H * L * D + 2 * B * H * S * D) * elem)
        if mistake == "elements":
            return flops / (io_bytes(B, H, L, S, D, element_size=elem) / elem)
        if mistake == "inverted":
            return io_bytes(B, H, L, S, D, element_size=elem) / flops
        raise ValueError(mistake)

    return run


# ---- ex08_time_call ---------------------------------------------------------------------------
# The device lives in the PARENT (served_device.py); the child sees only repeats and warmup.
def _timer_cases(rng: np.random.Generator) -> list[dict]:
    def case(repeats, warmup):
        return {
            "kernel_ms": round(float(rng.uniform(5, 20)), 3),
            "jitter": round(float(rng.uniform(0.05, 0.3)), 3),
            "seed": int(rng.integers(2**62)),
            "repeats": repeats,
            "warmup": warmup,
        }

    return [
        case(int(rng.integers(5, 9)), 1),
        case(int(rng.integers(4, 8)), int(rng.integers(2, 4))),
    ]


def serve_device(case: dict) -> DeviceService:
    """PARENT: the case's device, with per-student kernel times and a slow first launch."""
    return DeviceService(
        case["kernel_ms"],
        FIRST_CALL_EXTRA_MS,
        case["jitter"],
        case["seed"],
        case["repeats"],
        case["warmup"],
    )


def _timer_reference(kernel_ms, jitter, seed, repeats, warmup):
    return torch.tensor([repeats, 1.0, 1.0, 0.0, 0.0, 1.0], dtype=torch.float64)


HOST_CLOCK = (
    "host clock: the samples were not read from the device's events; a launch returns "
    "at once and the device keeps its own clock"
)
IN_SECONDS = "returned seconds: the samples are 1000 times too small for milliseconds"
WARMUP_TIMED = "the warm-up calls were returned as samples too: more samples than `repeats`"
NO_WARMUP = "no warm-up: the first launch's set-up cost is in the samples"
ONE_PAIR = (
    "one pair of events around all the repeats gives only their mean: the samples have no spread"
)


def _flag(k: int, value: float):
    return lambda out, case: out.shape == (6,) and out[k] == value


# ---- ex08_median_iqr ---------------------------------------------------------------------------
def _summary_cases(rng: np.random.Generator) -> list[dict]:
    def samples(n):
        x = float(rng.uniform(2, 20)) * (1 + 0.2 * rng.standard_exponential(n))
        x[rng.choice(n, size=max(1, n // 6), replace=False)] *= rng.uniform(2, 4)  # slow outliers
        return np.round(x, 4)

    return [
        {"samples_ms": samples(int(rng.integers(4, 9)) * 2)},  # an even count
        {"samples_ms": samples(int(rng.integers(3, 8)) * 2 + 1)},  # an odd count
        {"samples_ms": samples(6)},
    ]


def _median_iqr(samples_ms):
    s = summarize(samples_ms.tolist())
    return torch.tensor(s["ms_median"], dtype=torch.float64), torch.tensor(
        s["ms_iqr"], dtype=torch.float64
    )


def _summary_variant(median: str = "ok", spread: str = "ok"):
    def run(samples_ms):
        x = samples_ms.double()
        xs = x.sort().values
        m = {
            "ok": torch.quantile(x, 0.5),
            "mean": x.mean(),
            "lower middle": xs[(len(xs) - 1) // 2],
            "unsorted": x[len(x) // 2],
        }[median]
        q = statistics.quantiles(x.tolist(), n=4)  # the "exclusive" method
        r = {
            "ok": torch.quantile(x, 0.75) - torch.quantile(x, 0.25),
            "std": x.std(),
            "range": xs[-1] - xs[0],
            "exclusive": torch.tensor(q[2] - q[0], dtype=torch.float64),
        }[spread]
        return m, r

    return run


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

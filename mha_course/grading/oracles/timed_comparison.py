"""Chapter 8's items' cases, references and mistake variants (``chapters/ch08.py`` declares the
items): attention FLOPs, KV bytes read per decode step, the arithmetic intensity of a fused
attention forward, the timer's simulated device (served by the parent, :func:`serve_device`) and
the verdict it is compared with, and the median/IQR summary of timing samples."""

from __future__ import annotations

import statistics

import numpy as np
import torch

from mha_course.benchmark.flops import attention_flops, io_bytes
from mha_course.benchmark.timing import summarize
from mha_course.grading import mistakes as M
from mha_course.grading.child.served_device import DeviceService
from mha_grader.items import Dtype

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

"""Chapter 8's graded items: attention FLOPs (causal halves them), KV bytes read per decode step,
the arithmetic intensity of a fused attention forward, and a correctly synchronized timer."""

from __future__ import annotations

import numpy as np
import torch

from mha_grader.items import Dtype, Item, Mistake

from ...benchmark.flops import attention_flops, io_bytes
from ...benchmark.simulated import SimulatedAsyncDevice
from .. import mistakes as M

NOTEBOOK = "ex08_gpu_timed_comparison"
FIRST_CALL_EXTRA_MS = 500.0  # the simulated device's first call also pays this "set-up" cost


def _element_size(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---- ex08_attention_flops ---------------------------------------------------------------------
def _flops_cases(rng: np.random.Generator) -> list[dict]:
    def n(lo, hi):
        return int(rng.integers(lo, hi))

    return [
        {"B": n(1, 5), "H": n(2, 17), "L": n(100, 5000), "S": n(100, 5000), "D": 64, "causal": False},
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
        {"batch": 1, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
         "context": int(rng.integers(1000, 9000)), "dtype": Dtype("bfloat16")},
        {"batch": int(rng.integers(2, 9)), "num_heads": 64, "num_kv_heads": 8, "head_dim": 128,
         "context": int(rng.integers(100, 4000)), "dtype": Dtype("float16")},
        {"batch": 2, "num_heads": 12, "num_kv_heads": 4, "head_dim": 64,
         "context": int(rng.integers(10, 500)), "dtype": Dtype("float64")},
        {"batch": 3, "num_heads": 16, "num_kv_heads": 1, "head_dim": 64, "context": 2048,
         "dtype": Dtype("float32")},
    ]


def _bytes_reference(B, H, G, D, S, dtype, **mistake):
    return M.kv_cache_bytes_variant(1, H, G, D, S, B, dtype, **mistake)  # one layer's K and V


# ---- ex08_attention_intensity -----------------------------------------------------------------
def _intensity_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"B": 1, "H": 32, "L": 4096, "S": 4096, "D": 128, "dtype": Dtype("bfloat16")},
        {"B": int(rng.integers(1, 9)), "H": 32, "L": 1, "S": int(rng.integers(1000, 9000)), "D": 128,
         "dtype": Dtype("bfloat16")},
        {"B": 2, "H": int(rng.integers(2, 17)), "L": int(rng.integers(64, 1024)), "S": 512, "D": 64,
         "dtype": Dtype("float32")},
    ]


def _intensity_reference(B, H, L, S, D, dtype):
    return attention_flops(B, H, L, S, D) / io_bytes(B, H, L, S, D, element_size=_element_size(dtype))


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
def _timer_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {"kernel_ms": round(float(rng.uniform(10, 20)), 3), "repeats": int(rng.integers(3, 6)), "warmup": 1},
        {"kernel_ms": round(float(rng.uniform(12, 18)), 3), "repeats": 4, "warmup": int(rng.integers(2, 4))},
    ]


def drive_timer(fn, kernel_ms, repeats, warmup):
    """Runs in the CHILD: time a simulated asynchronous device with the learner's ``time_call``.

    Returns (float64) [samples returned, calls made, every sample >= the kernel time (ms),
    first call's set-up kept out of the samples, samples look like seconds].
    """
    device = SimulatedAsyncDevice(float(kernel_ms), first_extra_ms=FIRST_CALL_EXTRA_MS)
    try:
        samples = fn(device.launch, device.synchronize, int(repeats), int(warmup))
        device.synchronize()
    finally:
        device.close()
    s = np.asarray(torch.as_tensor(samples, dtype=torch.float64).reshape(-1))  # any shape -> (n,)
    if s.size == 0:
        return torch.tensor([0.0, device.calls, 0.0, 0.0, 0.0], dtype=torch.float64)
    at_least = bool(np.all(s >= 0.95 * kernel_ms))
    seconds = bool(np.all((s >= 0.95 * kernel_ms / 1e3) & (s < 1.0))) and not at_least
    first_out = bool(s.max() < kernel_ms + FIRST_CALL_EXTRA_MS / 2)
    return torch.tensor([s.size, device.calls, at_least, first_out, seconds], dtype=torch.float64)


def _timer_reference(kernel_ms, repeats, warmup):
    return torch.tensor([repeats, repeats + warmup, 1.0, 1.0, 0.0], dtype=torch.float64)


NOT_SYNCHRONIZED = ("the clock was read before the work finished: call synchronize() after fn() "
                    "(and before starting the clock) — a GPU launch returns at once, like this "
                    "simulated device's")
IN_SECONDS = "returned seconds; return milliseconds ((t1 - t0) * 1e3)"
WARMUP_TIMED = "the warm-up calls were returned as samples too: return only the `repeats` timed ones"
NO_WARMUP = ("the first call's set-up cost is in the samples: run fn() `warmup` times (and "
             "synchronize) before timing")


def _sample_count_is(extra: int):
    return lambda out, case: out.shape == (5,) and out[0] == case["repeats"] + extra * case["warmup"]


ITEMS = [
    Item(
        id="ex08_attention_flops", notebook=NOTEBOOK, function="count_attention_flops", points=1,
        task="FLOPs of one attention forward: 4·B·H·L·S·D, halved when causal",
        make_cases=_flops_cases, shape="()", reference=attention_flops,
        dtype_must_match=False, rtol=0.0, atol=0.5,
        mistakes=(
            Mistake("causal not halved", "causal attention skips about half of the (L, S) pairs: "
                    "halve the count when causal=True", variant=_flops_variant("not halved")),
            Mistake("one matmul", "half the count: there are two matmuls (Q Kᵀ and weights · V), and "
                    "a multiply-add is 2 FLOPs", variant=_flops_variant("one matmul")),
            Mistake("L squared", "used L·L: the scores are (L, S); cross-attention and decode have "
                    "L ≠ S", variant=_flops_variant("L squared")),
        ),
        forbidden=("mha_course.benchmark.flops.attention_flops",),
    ),
    Item(
        id="ex08_decode_kv_bytes", notebook=NOTEBOOK, function="decode_kv_bytes", points=1,
        task="bytes of K and V one decode step reads: batch · context · 2 · G · D · bytes_per_element",
        make_cases=_bytes_cases, shape="()", reference=_bytes_reference,
        dtype_must_match=False, rtol=0.0, atol=0.5,
        mistakes=(
            *M.kv_bytes_mistakes(_bytes_reference),
            Mistake("4 bytes", "assumed 4 bytes per number: use the dtype's element size "
                    "(torch.empty((), dtype=dtype).element_size())",
                    variant=lambda B, H, G, D, S, dt: _bytes_reference(B, H, G, D, S, torch.float32)),
        ),
        forbidden=("mha_course.benchmark.flops.kv_bytes_per_token",
                   "mha_course.benchmark.flops.decode_step_bytes", "mha_course.gqa.kv_cache_bytes",
                   "mha_course.gqa.kv_cache_elements"),
    ),
    Item(
        id="ex08_attention_intensity", notebook=NOTEBOOK, function="attention_intensity", points=1,
        task="FLOPs per byte of a fused attention forward: 4·B·H·L·S·D / bytes of Q, K, V and O",
        make_cases=_intensity_cases, shape="()", reference=_intensity_reference,
        dtype_must_match=False, rtol=1e-9, atol=0.0,
        mistakes=(
            Mistake("reads only", "the output O is written too: bytes = (Q + K + V + O) · "
                    "bytes_per_element", variant=_intensity_variant("reads only")),
            Mistake("elements", "divided by numbers, not bytes: multiply by the dtype's element size",
                    variant=_intensity_variant("elements")),
            Mistake("inverted", "bytes per FLOP: intensity is FLOPs / bytes",
                    variant=_intensity_variant("inverted")),
        ),
        forbidden=("mha_course.benchmark.flops.arithmetic_intensity",
                   "mha_course.benchmark.flops.io_bytes", "mha_course.benchmark.flops.attention_flops"),
    ),
    Item(
        id="ex08_time_call", notebook=NOTEBOOK, function="time_call", points=2,
        task="time fn `repeats` times after `warmup` untimed calls, synchronizing; ms per call",
        make_cases=_timer_cases, shape="(5,) summary of the samples",
        reference=_timer_reference, driver="mha_course.grading.chapters.ch08:drive_timer",
        dtype_must_match=False, rtol=0.0, atol=0.0,
        mistakes=(
            Mistake("not synchronized", NOT_SYNCHRONIZED,
                    matches=lambda out, case: out.shape == (5,) and out[2] == 0 and out[4] == 0),
            Mistake("seconds", IN_SECONDS, matches=lambda out, case: out.shape == (5,) and out[4] == 1),
            Mistake("warm-up timed", WARMUP_TIMED, matches=_sample_count_is(1)),
            Mistake("no warm-up", NO_WARMUP,
                    matches=lambda out, case: out.shape == (5,) and out[3] == 0),
        ),
        forbidden=("mha_course.benchmark.timing.time_interleaved",),
    ),
]

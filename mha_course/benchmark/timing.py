"""Chapter 8: timing done right — warm-up excluded, variants interleaved, medians and spread.

On a GPU each repeat is bracketed by CUDA events (the GPU's own clock: kernel launches return
before the work is done, so a host clock would time the launch) after flushing the L2 cache (so
repeat n+1 does not find repeat n's inputs already on chip). On the CPU, ``torch.utils.benchmark``
runs each block with a stated thread count. Either way the compared variants take turns round by
round, so a load spike from another process hits all of them, and each reports the median and
inter-quartile range (IQR) of its repeats rather than one lucky or unlucky run.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import torch.utils.benchmark as tb

DEFAULT_L2_FLUSH_BYTES = 256 * 2**20  # larger than any current GPU's L2 (H100: 50 MiB)
# torch.utils.benchmark imports torch.utils.cpp_extension, which logs this one line on import
# when a CUDA toolkit is installed (CUDA_HOME, /usr/local/cuda) but no GPU can be used: a fact
# about the machine, not about the timing, and it would land in a notebook's compared stderr.
CUDA_HOME_NOTICE = "No CUDA runtime is found, using CUDA_HOME="


class _DropCudaHomeNotice(logging.Filter):
    """Drops exactly the CUDA_HOME notice; every other record of the logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(CUDA_HOME_NOTICE)


def torch_benchmark() -> ModuleType:
    """``torch.utils.benchmark``, imported on first use without the CUDA_HOME notice.

    The filter sits on the ``torch.utils.cpp_extension`` logger only while the import runs:
    other messages from that logger, later messages (building an extension) and Python
    warnings are untouched.
    """
    notice_filter = _DropCudaHomeNotice()
    logger = logging.getLogger("torch.utils.cpp_extension")
    logger.addFilter(notice_filter)
    try:
        import torch.utils.benchmark as benchmark
    finally:
        logger.removeFilter(notice_filter)
    return benchmark


def summarize(samples_ms: list[float]) -> dict:
    """Median, quartiles and IQR of repeated timings (milliseconds).

    Quartiles use the "inclusive" method, so 1 sample gives IQR 0 and the result never depends
    on the sample order.
    """
    if not samples_ms:
        raise ValueError("samples_ms: expected at least one timing, got an empty list")
    xs = sorted(float(x) for x in samples_ms)
    if len(xs) == 1:
        q1 = q3 = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return {
        "ms_median": statistics.median(xs),
        "ms_q1": q1,
        "ms_q3": q3,
        "ms_iqr": q3 - q1,
        "ms_min": xs[0],
        "n_samples": len(xs),
        "samples_ms": xs,
    }


def classify_failure(exc: BaseException) -> tuple[str, str]:
    """Sort an exception from a benchmarked call into ``oom``, ``unsupported`` or ``error``.

    An out-of-memory is a result ("this does not fit"), an unsupported backend is a result
    ("this kernel cannot run this shape/dtype/device"); anything else is a bug to look at.
    """
    msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in msg.lower():
        return "oom", msg
    unsupported = (
        "No viable backend",
        "No available kernel",
        "not supported",
        "not implemented",
        "Unsupported",
    )
    if isinstance(exc, NotImplementedError) or any(u.lower() in msg.lower() for u in unsupported):
        return "unsupported", msg
    return "error", f"{type(exc).__name__}: {msg}"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _warm_up(fn: Callable[[], object], device: torch.device, warmup: int) -> dict:
    """Run ``fn`` ``max(warmup, 2)`` times, untimed except for the first call (reported as
    ``first_call_ms``: allocation, autotuning, compilation) and, on CUDA, measure its peak
    memory above what was already allocated during the last warm-up call."""
    try:
        start = time.perf_counter()
        fn()  # the first call: allocation, autotuning, torch.compile's compilation ...
        _synchronize(device)
        first_call_ms = (time.perf_counter() - start) * 1e3
        for _ in range(max(0, warmup - 2)):
            fn()
        if device.type == "cuda":
            _synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        fn()
        _synchronize(device)
    except Exception as exc:  # every failure becomes a reported status
        if device.type == "cuda":
            torch.cuda.empty_cache()
        status, reason = classify_failure(exc)
        return {"status": status, "reason": reason}
    peak = None
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device) - base)
    return {"status": "ok", "peak_mem_bytes": peak, "first_call_ms": first_call_ms}


def _calls_per_sample(timer: tb.Timer, min_block_s: float) -> int:
    """How many calls one timed block needs to last at least ``min_block_s``."""
    once = timer.timeit(1).median
    return max(1, math.ceil(min_block_s / max(once, 1e-9)))


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    device: torch.device | str = "cpu",
    rounds: int = 7,
    warmup: int = 2,
    min_block_s: float = 0.02,
    threads: int | None = None,
    flush_l2: bool = True,
) -> dict[str, dict]:
    """Time several zero-argument callables against each other, taking turns.

    Each ``fns`` entry is warmed up ``warmup`` times (not timed), then timed ``rounds`` times;
    the starting variant rotates from round to round. CPU: one sample is the mean of a block of
    calls lasting at least ``min_block_s`` (``torch.utils.benchmark.Timer`` with ``threads``).
    CUDA: one sample is one call between two CUDA events, after an L2 flush (``flush_l2``).

    Returns ``{name: {"status": "ok", "ms_median": ..., "ms_iqr": ..., ...}}``, or
    ``{"status": "oom" | "unsupported" | "error", "reason": ...}`` for a variant that failed.
    """
    device = torch.device(device)
    if rounds < 1:
        raise ValueError(f"rounds: expected at least 1, got {rounds}")
    threads = threads if threads is not None else torch.get_num_threads()
    results = {name: _warm_up(fn, device, warmup) for name, fn in fns.items()}
    live = [name for name, r in results.items() if r["status"] == "ok"]
    samples: dict[str, list[float]] = {name: [] for name in live}

    if device.type == "cuda":
        scratch = (
            torch.empty(DEFAULT_L2_FLUSH_BYTES, dtype=torch.uint8, device=device)
            if flush_l2
            else None
        )
        for r in range(rounds):
            order = live[r % max(1, len(live)) :] + live[: r % max(1, len(live))]
            events = []
            for name in order:
                if scratch is not None:
                    scratch.zero_()  # evict the previous repeat's data from L2 (not timed)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                if _guarded(fns[name], name, results, live)[0]:
                    end.record()
                    events.append((name, start, end))
            torch.cuda.synchronize(device)  # events are only readable once the GPU reached them
            for name, start, end in events:
                samples[name].append(start.elapsed_time(end))
    else:
        tb = torch_benchmark()
        timers = {
            name: tb.Timer(
                stmt="fn()", globals={"fn": fns[name]}, num_threads=threads, description=name
            )
            for name in live
        }
        number = {}
        for name, t in list(timers.items()):
            ok, n = _guarded(lambda t=t: _calls_per_sample(t, min_block_s), name, results, live)
            number[name] = n
        for r in range(rounds):
            order = live[r % max(1, len(live)) :] + live[: r % max(1, len(live))]
            for name in order:
                ok, m = _guarded(
                    lambda name=name: timers[name].timeit(number[name]), name, results, live
                )
                if ok:
                    samples[name].append(m.median * 1e3)  # seconds per call -> ms

    for name in live:
        results[name].update(summarize(samples[name]))
        results[name]["rounds_ms"] = samples[name]  # in round order: for per-round ratios
    return results


def round_ratios(num: dict, den: dict) -> dict:
    """The ratio ``num / den`` of two results of ONE :func:`time_interleaved` call, round by
    round (a round's two samples ran minutes apart at most, under the same load), summarized:
    median, quartiles and every ratio. The ratio of the two medians mixes samples of different
    rounds, so one loaded round moves it; the median of the per-round ratios does not.

    Shape:
        num, den: result dicts with ``rounds_ms`` of equal length. Returns a dict.
    """
    a, b = num.get("rounds_ms"), den.get("rounds_ms")
    if not a or not b or len(a) != len(b):
        raise ValueError(
            f"num, den: expected two results of one time_interleaved call with the same number "
            f"of rounds (their 'rounds_ms'), got {len(a or [])} and {len(b or [])} rounds"
        )
    ratios = [x / y for x, y in zip(a, b)]
    s = summarize(ratios)
    return {"median": s["ms_median"], "q1": s["ms_q1"], "q3": s["ms_q3"], "ratios": ratios}


def _guarded(
    call: Callable[[], object], name: str, results: dict, live: list[str]
) -> tuple[bool, object]:
    """Run one timed call -> (ok, its value). A failure after a successful warm-up (e.g. an OOM
    from fragmentation) is recorded like a warm-up failure; the variant leaves the later rounds."""
    try:
        return True, call()
    except Exception as exc:  # every failure becomes a reported status
        results[name] = dict(zip(("status", "reason"), classify_failure(exc)))
        live.remove(name)
        return False, None

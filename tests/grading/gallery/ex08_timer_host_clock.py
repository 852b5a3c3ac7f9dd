"""ex08: a warmed-up, synchronized HOST-clock timer: right on a CPU, but it never reads the device's clock."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
import time


def time_call(fn, new_event, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples
"""
}
EXPECT = {"ex08_time_call": ("wrong values", "host clock")}

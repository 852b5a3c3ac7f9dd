"""ex08: a timer that reads the clock without synchronizing (times the launch only)."""
NOTEBOOK = "ex08"
REPLACE = {"ex08_time_call": '''
def time_call(fn, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples
'''}
EXPECT = {"ex08_time_call": ("wrong values", "not synchronized")}

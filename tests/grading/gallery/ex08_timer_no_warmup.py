"""ex08: a synchronized timer without warm-up: the first call's set-up is in the samples."""
NOTEBOOK = "ex08"
REPLACE = {"ex08_time_call": '''
def time_call(fn, synchronize, repeats, warmup):
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples
'''}
EXPECT = {"ex08_time_call": ("wrong values", "no warm-up")}

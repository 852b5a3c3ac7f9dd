"""ex08: a correct timer that returns seconds instead of milliseconds."""
NOTEBOOK = "ex08"
REPLACE = {"ex08_time_call": '''
def time_call(fn, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize()
        samples.append(time.perf_counter() - t0)
    return samples
'''}
EXPECT = {"ex08_time_call": ("wrong values", "seconds")}

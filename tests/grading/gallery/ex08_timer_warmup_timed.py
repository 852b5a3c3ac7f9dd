"""ex08: the warm-up calls are timed and returned with the samples."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
def time_call(fn, new_event, synchronize, repeats, warmup):
    pairs = []
    for _ in range(warmup + repeats):
        start, end = new_event(), new_event()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    synchronize()
    return [s.elapsed_time(e) for s, e in pairs]
"""
}
EXPECT = {"ex08_time_call": ("wrong values", "warm-up timed")}

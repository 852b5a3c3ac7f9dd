"""ex08: a correct event timer that returns seconds instead of milliseconds."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
def time_call(fn, new_event, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(repeats):
        start, end = new_event(), new_event()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in pairs]
"""
}
EXPECT = {"ex08_time_call": ("wrong values", "seconds")}

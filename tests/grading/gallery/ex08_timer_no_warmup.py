"""ex08: an event timer without warm-up: the first launch's set-up cost is in the samples."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
def time_call(fn, new_event, synchronize, repeats, warmup):
    pairs = []
    for _ in range(repeats):
        start, end = new_event(), new_event()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    synchronize()
    return [s.elapsed_time(e) for s, e in pairs]
"""
}
EXPECT = {"ex08_time_call": ("wrong values", "no warm-up")}

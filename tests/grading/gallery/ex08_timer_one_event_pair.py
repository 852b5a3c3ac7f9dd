"""ex08: one pair of events around all the repeats, divided by `repeats`: a mean, no spread."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
def time_call(fn, new_event, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    start, end = new_event(), new_event()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    synchronize()
    return [start.elapsed_time(end) / repeats] * repeats
"""
}
EXPECT = {"ex08_time_call": ("wrong values", "one pair of events")}

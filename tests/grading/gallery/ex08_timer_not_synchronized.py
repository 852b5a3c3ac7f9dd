"""ex08: events read before a synchronize (CUDA raises 'device not ready'; so does the grader's device)."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_time_call": """
def time_call(fn, new_event, synchronize, repeats, warmup):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start, end = new_event(), new_event()
        start.record()
        fn()
        end.record()
        samples.append(start.elapsed_time(end))
    return samples
"""
}
EXPECT = {"ex08_time_call": ("error", "not synchronized")}

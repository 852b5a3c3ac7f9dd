"""ex14: the sinks' causality checked against the query's row in the chunk (j <= i) instead of
its position (j <= p = S - L + i): after a cache, the first rows lose sinks they can see."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_window_mask": """
def window_mask(L, S, window, num_sink):
    p = torch.arange(S - L, S)[:, None]
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    return ((j <= p) & (j > p - window)) | ((j < num_sink) & (j <= i))
"""
}
EXPECT = {"ex14_window_mask": ("wrong values", "sinks by row")}

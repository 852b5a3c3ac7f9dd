"""ex14: the queries sit at 0 .. L-1 instead of the last L positions."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_window_mask": """
def window_mask(L, S, window, num_sink):
    p = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    return (j <= p) & ((j > p - window) | (j < num_sink))
""",
}
EXPECT = {"ex14_window_mask": ("wrong values", "queries not offset")}

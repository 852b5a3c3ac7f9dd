"""ex14: the window keeps W - 1 keys (the query's own position not counted)."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_window_mask": """
def window_mask(L, S, window, num_sink):
    p = torch.arange(S - L, S)[:, None]
    j = torch.arange(S)[None, :]
    return (j <= p) & ((j > p - window + 1) | (j < num_sink))
""",
}
EXPECT = {"ex14_window_mask": ("wrong values", "window one too narrow")}

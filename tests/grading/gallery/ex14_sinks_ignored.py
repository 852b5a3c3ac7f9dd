"""ex14: the attention sinks are left out."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_window_mask": """
def window_mask(L, S, window, num_sink):
    p = torch.arange(S - L, S)[:, None]
    j = torch.arange(S)[None, :]
    return (j <= p) & (j > p - window)
""",
}
EXPECT = {"ex14_window_mask": ("wrong values", "sinks ignored")}

"""ex14: (causal & window) | sink: an early query sees sinks after it."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_window_mask": """
def window_mask(L, S, window, num_sink):
    p = torch.arange(S - L, S)[:, None]
    j = torch.arange(S)[None, :]
    return ((j <= p) & (j > p - window)) | (j < num_sink)
""",
}
EXPECT = {"ex14_window_mask": ("wrong values", "sinks not causal")}

"""ex18: the sliding window keeps window + 1 keys (<= instead of <)."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_sliding_window": """
def sliding_window_mask(q_idx, kv_idx, window):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
"""
}
EXPECT = {"ex18_sliding_window": ("wrong values", "off by one")}

"""ex18: the sliding window measured with abs, so it also sees the next keys."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_sliding_window": """
def sliding_window_mask(q_idx, kv_idx, window):
    return (q_idx - kv_idx).abs() < window
"""
}
EXPECT = {"ex18_sliding_window": ("wrong values", "not causal")}

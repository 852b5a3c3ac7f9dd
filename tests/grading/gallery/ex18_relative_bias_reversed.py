"""ex18: the relative distance taken as query minus key, so the table is read mirrored."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_relative_bias": """
def relative_bias_score(score, h, q_idx, kv_idx, table, max_distance):
    d = (q_idx - kv_idx).clamp(-max_distance, max_distance)
    return score + table[h, d + max_distance]
"""
}
EXPECT = {"ex18_relative_bias": ("wrong values", "reversed")}

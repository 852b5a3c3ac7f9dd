"""ex18: the ALiBi bias added instead of subtracted."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_alibi": """
def alibi_score(score, h, q_idx, kv_idx, slopes):
    return score + slopes[h] * (q_idx - kv_idx).abs()
"""
}
EXPECT = {"ex18_alibi": ("wrong values", "sign")}

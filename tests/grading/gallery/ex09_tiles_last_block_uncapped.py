"""ex09: the last query block counted as if it ran to i0 + block_q - 1 (not cut at L - 1)."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_predict_causal_tiles": """
def predict_causal_tiles(L, S, block_q, block_k):
    total = 0
    for start in range(0, L, block_q):
        last = start + block_q - 1
        total += math.ceil(min(S, last + 1) / block_k)
    return total
"""
}
EXPECT = {"ex09_predict_causal_tiles": ("wrong values", "not at i0 + block_q - 1")}

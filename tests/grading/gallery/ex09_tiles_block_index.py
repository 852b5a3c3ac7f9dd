"""ex09: causal tiles counted by block index (j <= i), right only when block_q == block_k."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_predict_causal_tiles": """
def predict_causal_tiles(L, S, block_q, block_k):
    n_k = math.ceil(S / block_k)
    return sum(min(i + 1, n_k) for i in range(math.ceil(L / block_q)))
"""
}
EXPECT = {"ex09_predict_causal_tiles": ("wrong values", "block indices")}

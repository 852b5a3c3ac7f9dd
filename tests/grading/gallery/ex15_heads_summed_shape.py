"""ex15: one matrix for all heads: W_UK^T W_UQ."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_absorb_query": """
def absorb_query(W_UQ, W_UK, num_heads):
    D = W_UQ.shape[0] // num_heads
    return W_UK.T @ W_UQ
""",
}
EXPECT = {"ex15_absorb_query": ("wrong shape", "summed over heads")}

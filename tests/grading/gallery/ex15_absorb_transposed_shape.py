"""ex15: W_UQ,h^T W_UK,h: the absorbed matrix transposed."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_absorb_query": """
def absorb_query(W_UQ, W_UK, num_heads):
    D = W_UQ.shape[0] // num_heads
    uq = W_UQ.reshape(num_heads, D, -1)
    uk = W_UK.reshape(num_heads, D, -1)
    return uq.transpose(1, 2) @ uk
""",
}
EXPECT = {"ex15_absorb_query": ("wrong shape", "absorbed projection transposed")}

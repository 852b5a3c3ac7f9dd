"""ex15: head h taken as rows h, h + H, ...."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_absorb_query": """
def absorb_query(W_UQ, W_UK, num_heads):
    D = W_UQ.shape[0] // num_heads
    uq = W_UQ.reshape(D, num_heads, -1).transpose(0, 1)
    uk = W_UK.reshape(D, num_heads, -1).transpose(0, 1)
    return uk.transpose(1, 2) @ uq
""",
}
EXPECT = {"ex15_absorb_query": ("wrong values", "heads strided")}

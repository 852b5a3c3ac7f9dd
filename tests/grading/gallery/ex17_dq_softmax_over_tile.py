"""ex17: P recomputed as a softmax over the tile instead of from the row's log-sum-exp."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_dq_tile": """
def dq_tile(q, k, v, d_out, lse, d_term, scale):
    p = torch.softmax(scale * (q @ k.transpose(-2, -1)), dim=-1)
    ds = p * (d_out @ v.transpose(-2, -1) - d_term.unsqueeze(-1))
    return scale * (ds @ k)
"""
}
EXPECT = {"ex17_dq_tile": ("wrong values", "softmax over the tile")}

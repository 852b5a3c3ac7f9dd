"""ex17: dS = P * dP, the softmax backward's row term D forgotten."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_dq_tile": """
def dq_tile(q, k, v, d_out, lse, d_term, scale):
    p = torch.exp(scale * (q @ k.transpose(-2, -1)) - lse.unsqueeze(-1))
    ds = p * (d_out @ v.transpose(-2, -1))
    return scale * (ds @ k)
"""
}
EXPECT = {"ex17_dq_tile": ("wrong values", "no D")}

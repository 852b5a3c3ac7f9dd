"""ex17: D summed from dO alone, forgetting the product with the output."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_d_term": """
def d_term(out, d_out):
    return d_out.sum(dim=-1)
"""
}
EXPECT = {"ex17_d_term": ("wrong values", "dO alone")}

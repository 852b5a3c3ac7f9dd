"""ex17: two partial outputs averaged instead of weighted by their softmax mass."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_lse_merge": """
def merge_partials(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)
"""
}
EXPECT = {"ex17_lse_merge": ("wrong values", "averaged")}

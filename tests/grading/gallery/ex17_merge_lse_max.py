"""ex17: the merged log-sum-exp taken as the larger of the two."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_lse_merge": """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b
    return out, torch.maximum(lse_a, lse_b)
"""
}
EXPECT = {"ex17_lse_merge": ("wrong values", "lse max")}

"""ex19: the textbook merge, logaddexp then exp(lse_a - lse): NaN where both partials are empty
(-inf - (-inf)); the ring step that uses it is graded with the course's own merge and keeps its marks."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_safe_merge": """
def merge_safe(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b, lse
""",
}
EXPECT = {
    "ex19_safe_merge": ("wrong values", "NaN from an empty partial"),
}

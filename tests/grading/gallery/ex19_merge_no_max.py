"""ex19: the merge without the maximum: exp(lse) overflows in float32 (inf / inf = NaN); the
ring step that calls it is graded with the course's own merge and keeps its marks."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_safe_merge": """
def merge_safe(out_a, lse_a, out_b, lse_b):
    w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)
    total = w_a + w_b
    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / torch.where(total > 0, total, torch.ones_like(total))[..., None]
    return out, torch.log(total)
""",
}
EXPECT = {
    "ex19_safe_merge": ("wrong values", "without the maximum subtracted"),
}

"""ex05: the diagonal is excluded: a new token cannot see itself."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_offset_mask": """
def offset_causal_mask(L, offset):
    return torch.tril(torch.ones(L, offset + L, dtype=torch.bool), diagonal=offset - 1)
"""
}
EXPECT = {"ex05_offset_mask": ("wrong values", "off by one")}

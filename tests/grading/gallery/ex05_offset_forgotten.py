"""ex05: the causal mask is top-left aligned: the cache offset is forgotten."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_offset_mask": """
def offset_causal_mask(L, offset):
    return torch.tril(torch.ones(L, offset + L, dtype=torch.bool))
"""
}
EXPECT = {"ex05_offset_mask": ("wrong values", "offset forgotten")}

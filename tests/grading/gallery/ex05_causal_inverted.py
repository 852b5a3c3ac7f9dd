"""ex05: the offset mask marks the FORBIDDEN keys."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_offset_mask": """
def offset_causal_mask(L, offset):
    return torch.triu(torch.ones(L, offset + L, dtype=torch.bool), diagonal=offset + 1)
"""
}
EXPECT = {"ex05_offset_mask": ("wrong values", "inverted")}

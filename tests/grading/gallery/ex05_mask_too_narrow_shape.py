"""ex05: the mask covers only the new keys: (L, L) instead of (L, offset + L)."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_offset_mask": """
def offset_causal_mask(L, offset):
    return torch.tril(torch.ones(L, L, dtype=torch.bool))
"""
}
EXPECT = {"ex05_offset_mask": ("wrong shape", "mask too narrow")}

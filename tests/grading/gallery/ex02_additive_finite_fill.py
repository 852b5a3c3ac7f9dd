"""ex02: -1e9 instead of -inf in the additive mask."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_additive_mask": """
def additive_mask(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, -1e9)
"""
}
EXPECT = {"ex02_additive_mask": ("wrong values", "finite fill")}

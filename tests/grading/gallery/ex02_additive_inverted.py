"""ex02: -inf where attending is allowed, 0 where it is not."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_additive_mask": """
def additive_mask(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))
"""
}
EXPECT = {"ex02_additive_mask": ("wrong values", "mask inverted")}

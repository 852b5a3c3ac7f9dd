"""ex02: the causal mask marks the future as allowed (True = masked, the wrong convention)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_causal_mask": """
def make_causal_mask(L, S):
    return torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
"""
}
EXPECT = {"ex02_causal_mask": ("wrong values", "mask inverted")}

"""ex02: the causal mask leaves out the diagonal (a token may not see itself)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_causal_mask": """
def make_causal_mask(L, S):
    return torch.tril(torch.ones(L, S, dtype=torch.bool), diagonal=-1)
"""
}
EXPECT = {"ex02_causal_mask": ("wrong values", "off by one")}

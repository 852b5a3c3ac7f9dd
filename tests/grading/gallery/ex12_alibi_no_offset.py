"""ex12: ALiBi's queries placed at positions 0 .. L-1 instead of the last L of S positions."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_alibi": """
def alibi(num_heads, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)
    distance = (torch.arange(L)[:, None] - torch.arange(S)[None, :]).abs()
    return -slopes[:, None, None] * distance
"""
}
EXPECT = {"ex12_alibi": ("wrong values", "no offset")}

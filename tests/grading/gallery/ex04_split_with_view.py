"""ex04: heads split with view straight to (B, H, T, D); the forward that uses it is
graded with the course's own split and keeps its marks."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_split_heads": """
def split_heads(x, num_heads):
    B, T, E = x.shape
    return x.view(B, num_heads, T, E // num_heads)
"""
}
EXPECT = {
    "ex04_split_heads": ("wrong values", "split with view"),
}

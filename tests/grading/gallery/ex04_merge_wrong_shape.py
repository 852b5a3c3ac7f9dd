"""ex04: merge stops at (B, T, H, D): the wrong shape in letters; the forward, graded with the
course's own merge, keeps its marks."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_merge_heads": """
def merge_heads(x):
    return x.transpose(1, 2)
"""
}
EXPECT = {
    "ex04_merge_heads": ("wrong shape", "expected shape (B, T, E) = (2, 5, 12), got (2, 5, 3, 4)"),
}

"""ex02: scores not divided by sqrt(D) (the attention built on them inherits it)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_scaled_scores": """
def scaled_scores(query, key):
    return query @ key.transpose(-2, -1)
"""
}
EXPECT = {
    "ex02_scaled_scores": ("wrong values", "no scaling"),
    "ex02_attention": ("wrong values", "no scaling"),
}

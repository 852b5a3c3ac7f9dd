"""ex02: scores not divided by sqrt(D) (the attention built on them is graded
with the course's own and keeps its marks)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_scaled_scores": """
def scaled_scores(query, key):
    return query @ key.transpose(-2, -1)
"""
}
EXPECT = {
    "ex02_scaled_scores": ("wrong values", "no scaling"),
}

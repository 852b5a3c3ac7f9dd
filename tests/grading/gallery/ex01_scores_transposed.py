"""ex01: keys @ query.T — the scores come out (S, L); the attention that uses them
is graded with the course's own and keeps its marks (issue #31 item 5)."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_scores": """
def dot_scores(query, keys):
    return keys @ query.T
"""
}
EXPECT = {"ex01_scores": ("wrong shape", "expected shape (L, S) = ")}

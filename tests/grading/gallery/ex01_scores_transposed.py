"""ex01: keys @ query.T — the scores come out (S, L); the attention that uses them breaks too."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_scores": """
def dot_scores(query, keys):
    return keys @ query.T
"""
}
EXPECT = {"ex01_scores": ("wrong shape", "expected shape (L, S) = "), "ex01_attend": ("error", "")}

"""ex01: the raw scores are used as weights."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_attend": """
def attend(query, keys, values):
    scores = dot_scores(query, keys)
    return scores @ values, scores
"""
}
EXPECT = {"ex01_attend": ("wrong values", "no softmax")}

"""ex01: the debug task half fixed: the sum runs over the keys, the maximum still over the queries."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_fix_weights": """
def attention_weights(query, keys):
    scores = query @ keys.T
    e = np.exp(scores - scores.max(axis=0, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""
}
EXPECT = {"ex01_fix_weights": ("wrong values", "half fixed")}

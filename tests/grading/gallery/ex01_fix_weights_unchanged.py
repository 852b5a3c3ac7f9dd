"""ex01: the debug task handed in with the given bug still there (softmax over the queries)."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_fix_weights": """
def attention_weights(query, keys):
    scores = query @ keys.T
    e = np.exp(scores - scores.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
"""
}
EXPECT = {"ex01_fix_weights": ("wrong values", "wrong axis (the given bug)")}

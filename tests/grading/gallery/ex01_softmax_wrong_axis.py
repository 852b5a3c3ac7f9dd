"""ex01: the softmax normalises the columns instead of the rows (the attention uses it, and is
graded with the course's own: it keeps its marks)."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_softmax": """
def softmax(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
"""
}
EXPECT = {
    "ex01_softmax": ("wrong values", "wrong axis"),
}

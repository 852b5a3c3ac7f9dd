"""ex01: chapter 1's one-vector softmax copied for (..., S) input: one max and one sum over the
whole array (the attention reuses it: graded with the course's own, it keeps its marks)."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_softmax": """
def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()
"""
}
EXPECT = {
    "ex01_softmax": ("wrong values", "normalised over the whole array"),
}

"""ex01: chapter 1's one-vector softmax copied for (..., S) input: one max and one sum over the
whole array (the attention reuses it, and says so)."""

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
    "ex01_attend": ("wrong values", "this item calls your `softmax` from task 1"),
}

"""ex01: softmax without subtracting the maximum overflows on large logits."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_softmax": """
def softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
"""
}
EXPECT = {"ex01_softmax": ("non-finite", "overflow")}

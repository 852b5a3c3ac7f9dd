"""ex01: the maximum subtracted is the whole array's, not each row's (a row far below it
underflows to 0 / 0)."""

NOTEBOOK = "ex01"
REPLACE = {
    "ex01_softmax": """
def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum(axis=-1, keepdims=True)
"""
}
EXPECT = {"ex01_softmax": ("non-finite", "NaN/inf value(s) where the expected output is finite")}

"""ex13: the induction score reads the earlier copy of the token itself (off by one)."""

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_induction_score": """
def induction_score(weights, period):
    d = weights.diagonal(offset=-period, dim1=-2, dim2=-1)
    return d.mean(dim=(0, -1))
"""
}
EXPECT = {"ex13_induction_score": ("wrong values", "the copy itself")}

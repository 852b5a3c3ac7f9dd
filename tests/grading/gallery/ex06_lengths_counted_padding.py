"""ex06: the zero-weight (padded) positions counted instead of the real ones."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_lengths_from_weights": """
def lengths_from_weights(weights):
    return (weights == 0).all(dim=2).all(dim=1).sum(dim=-1)
"""
}
EXPECT = {"ex06_lengths_from_weights": ("wrong values", "counted padding")}

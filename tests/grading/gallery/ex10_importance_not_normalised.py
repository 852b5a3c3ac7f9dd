"""ex10: the normalize flag is ignored."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_head_importance": """
def head_importance(grads, normalize):
    return grads.abs().mean(dim=0)
"""
}
EXPECT = {"ex10_head_importance": ("wrong values", "not normalised")}

"""ex10: normalised by the norm of all layers together instead of each layer's."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_head_importance": """
def head_importance(grads, normalize):
    scores = grads.abs().mean(dim=0)
    if normalize:
        scores = scores / scores.norm()
    return scores
"""
}
EXPECT = {"ex10_head_importance": ("wrong values", "global norm")}

"""ex10: |mean gradient| instead of mean |gradient|."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_head_importance": """
def head_importance(grads, normalize):
    scores = grads.mean(dim=0).abs()
    if normalize:
        scores = scores / scores.norm(dim=-1, keepdim=True)
    return scores
"""
}
EXPECT = {"ex10_head_importance": ("wrong values", "abs after mean")}

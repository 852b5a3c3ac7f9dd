"""ex04: the main diagonal (each token itself) read as the previous token."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_previous_token_head": """
def previous_token_head(weights):
    return int(torch.diagonal(weights, dim1=-2, dim2=-1).mean(dim=-1).argmax())
"""
}
EXPECT = {"ex04_previous_token_head": ("wrong values", "picked the diagonal")}

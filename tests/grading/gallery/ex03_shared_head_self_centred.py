"""ex03: the head with the strongest diagonal taken for the one with a shared projection."""

NOTEBOOK = "ex03"
REPLACE = {
    "ex03_shared_projection_head": """
def shared_projection_head(scores):
    T = scores.shape[-1]
    diag = torch.diagonal(scores, dim1=-2, dim2=-1).mean(-1)
    off = (scores.sum((-2, -1)) - diag * T) / (T * T - T)
    return int((diag - off).argmax())
"""
}
EXPECT = {"ex03_shared_projection_head": ("wrong values", "self-centred")}

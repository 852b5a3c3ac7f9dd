"""ex02: the weights read with the mask convention the wrong way round (True = blocked)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_which_mask": """
def which_mask(weights, masks):
    blocked = weights == 0
    return next(k for k in range(masks.shape[0]) if torch.equal(masks[k], blocked))
"""
}
EXPECT = {"ex02_which_mask": ("wrong values", "inverted reading")}

"""ex06: the first padded position counted as a real token."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_padding_mask": """
def padding_mask_from_lengths(lengths, S):
    return torch.arange(S)[None, :] > lengths[:, None]
"""
}
EXPECT = {"ex06_padding_mask": ("wrong values", "off by one")}

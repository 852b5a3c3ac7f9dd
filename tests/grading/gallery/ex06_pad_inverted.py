"""ex06: the padding mask marks the REAL tokens."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_padding_mask": """
def padding_mask_from_lengths(lengths, S):
    return torch.arange(S)[None, :] < lengths[:, None]
"""
}
EXPECT = {"ex06_padding_mask": ("wrong values", "inverted")}

"""ex06: the mask is only max(lengths) wide."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_padding_mask": """
def padding_mask_from_lengths(lengths, S):
    return torch.arange(int(lengths.max()))[None, :] >= lengths[:, None]
"""
}
EXPECT = {"ex06_padding_mask": ("wrong shape", "S ignored")}

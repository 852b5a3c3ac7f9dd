"""ex08: arithmetic intensity forgetting that the output is written."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_attention_intensity": """
def attention_intensity(B, H, L, S, D, dtype):
    element_size = torch.empty((), dtype=dtype).element_size()
    return 4 * B * H * L * S * D / ((B * H * L * D + 2 * B * H * S * D) * element_size)
"""
}
EXPECT = {"ex08_attention_intensity": ("wrong values", "reads only")}

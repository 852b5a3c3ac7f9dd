"""ex16: an all-zero token divided by a zero scale."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_quantize": """
def quantize_int8(x, axis):
    scale = x.abs().amax(dim=-1 if axis == "token" else -2, keepdim=True) / 127
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale
""",
}
EXPECT = {"ex16_quantize": ("wrong values", "all-zero group")}

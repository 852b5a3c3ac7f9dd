"""ex16: 'token' reduces over S and 'channel' over D."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_quantize": """
def quantize_int8(x, axis):
    amax = x.abs().amax(dim=-2 if axis == "token" else -1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale
""",
}
EXPECT = {"ex16_quantize": ("wrong values", "scales on the wrong axis")}

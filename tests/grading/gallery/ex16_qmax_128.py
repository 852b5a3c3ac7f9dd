"""ex16: scale = max|x| / 128."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_quantize": """
def quantize_int8(x, axis):
    amax = x.abs().amax(dim=-1 if axis == "token" else -2, keepdim=True)
    scale = torch.where(amax > 0, amax / 128, torch.ones_like(amax))
    return torch.round(x / scale).clamp(-128, 127).to(torch.int8), scale
""",
}
EXPECT = {"ex16_quantize": ("wrong values", "q_max 128")}

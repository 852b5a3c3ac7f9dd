"""ex12: rope always rotates the half-layout pairs (i, i + D/2), also when asked for interleaved."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_rope": """
def rope(x, positions, layout):
    D = x.shape[-1]
    theta = 10000.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., : D // 2], x[..., D // 2:]
    out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out, torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
"""
}
EXPECT = {"ex12_rope": ("wrong values", "wrong layout: rotated the wrong pairs")}

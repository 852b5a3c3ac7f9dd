"""ex12: the rotate-half trick with the sign on the wrong half (a rotation by -θ); the decoding
step that reuses that rope is graded with the course's own and keeps its marks."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_rope": """
def rope(x, positions, layout):
    D = x.shape[-1]
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = torch.outer(positions.double(), inv_freq)
    cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    if layout == "half":
        a, b = x[..., : D // 2], x[..., D // 2:]
        rotated = torch.cat([b, -a], dim=-1)
        c, s = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        return x * c + rotated * s, c, s
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * cos + b * sin, -a * sin + b * cos], dim=-1).flatten(-2)
    return out, cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
"""
}
EXPECT = {
    "ex12_rope": ("wrong values", "wrong direction"),
}

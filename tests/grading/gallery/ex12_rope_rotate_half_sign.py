"""ex12: the rotate-half trick with the sign on the wrong half (a rotation by -θ); the decoding
step reuses that rope, so it loses its marks too, with the same diagnosis."""
NOTEBOOK = "ex12"
REPLACE = {"ex12_rope": '''
def rope(x, positions, layout):
    D = x.shape[-1]
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    freqs = torch.outer(positions.double(), inv_freq)
    cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    if layout == "half":
        a, b = x[..., : D // 2], x[..., D // 2:]
        rotated = torch.cat([b, -a], dim=-1)
        return x * torch.cat([cos, cos], dim=-1) + rotated * torch.cat([sin, sin], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos + b * sin, -a * sin + b * cos], dim=-1).flatten(-2)
'''}
EXPECT = {"ex12_rope": ("wrong values", "wrong direction"),
          "ex12_rope_decode_step": ("wrong values", "wrong direction")}

"""ex12: all sines then all cosines (concatenated halves) instead of interleaved pairs."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_sinusoidal": """
def sinusoidal(num_positions, embed_dim):
    p = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angles = p / 10000.0 ** (torch.arange(0, embed_dim, 2, dtype=torch.float64) / embed_dim)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)
"""
}
EXPECT = {"ex12_sinusoidal": ("wrong values", "halves")}

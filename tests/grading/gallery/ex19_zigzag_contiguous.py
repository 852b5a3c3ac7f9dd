"""ex19: contiguous positions where the zig-zag layout was asked for."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_zigzag_positions": """
def zigzag_positions(rank, world_size, T):
    n = T // world_size
    return torch.arange(rank * n, (rank + 1) * n)
"""
}
EXPECT = {"ex19_zigzag_positions": ("wrong values", "contiguous")}

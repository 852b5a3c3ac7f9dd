"""ex19: P sends counted per rank, though the last step sends nothing."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_bytes": """
def ring_bytes_per_rank(B, H, T, D, P, element_size):
    return 2 * P * B * H * (T // P) * D * element_size
"""
}
EXPECT = {"ex19_ring_bytes": ("wrong values", "P steps")}

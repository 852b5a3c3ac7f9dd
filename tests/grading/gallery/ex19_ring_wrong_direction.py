"""ex19: the ring's schedule turned the wrong way."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_source": """
def ring_source(rank, step, world_size):
    return (rank + step) % world_size
"""
}
EXPECT = {"ex19_ring_source": ("wrong values", "wrong direction")}

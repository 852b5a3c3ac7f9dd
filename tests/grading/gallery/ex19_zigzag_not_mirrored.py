"""ex19: the zig-zag layout read as chunks r and r + P (the second half not mirrored)."""

from gallery_edits import edited

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_zigzag_positions": edited(
        "ex19",
        "ex19_zigzag_positions",
        [("2 * world_size - 1 - rank", "world_size + rank")],
    )
}
EXPECT = {"ex19_zigzag_positions": ("wrong values", "second chunk not mirrored")}

"""ex16: the partial last block hashed too (two equal prompts share a block still being written)."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            (
                "for j in range(len(toks) // bs):  # full blocks only",
                "for j in range(-(-len(toks) // bs)):  # every block",
            ),
        ],
    )
}
EXPECT = {"ex16_serve": ("wrong values", "the partial last block was hashed")}

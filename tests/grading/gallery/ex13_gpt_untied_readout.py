"""ex13: the read-out is a matrix of its own, not the embedding (weights not tied)."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_gpt": ("wrong values", "untied read-out")}
REPLACE = {
    "ex13_gpt": edited(
        "ex13",
        "ex13_gpt",
        [
            ("        self.lm_head.weight = self.wte.weight  # tied: one (V, E) matrix\n", ""),
        ],
    )
}

"""ex13: the attention's output replaces the stream (no residual around it). The SmallGPT
around it is graded with the course's Block and keeps its marks."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_block": ("wrong values", "missing residual")}
REPLACE = {
    "ex13_block": edited(
        "ex13",
        "ex13_block",
        [
            (
                "        a, _ = self.attn(self.ln_1(x), is_causal=True)  # (B, T, E)\n        x = x + a",
                "        x, _ = self.attn(self.ln_1(x), is_causal=True)",
            ),
        ],
    )
}

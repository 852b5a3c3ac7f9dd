"""ex13: self-attention without the causal mask (each position reads the future). The SmallGPT
around it is graded with the course's Block and keeps its marks."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {
    "ex13_block": ("wrong values", "no causal mask"),
}
REPLACE = {
    "ex13_block": edited(
        "ex13",
        "ex13_block",
        [
            (
                "        a, _ = self.attn(self.ln_1(x), is_causal=True)  # (B, T, E)",
                "        a, _ = self.attn(self.ln_1(x), is_causal=False)  # (B, T, E)",
            ),
        ],
    )
}

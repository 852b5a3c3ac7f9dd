"""ex13: a hand-made causal mask whose diagonal is one too high (each query sees the next token). The SmallGPT
around it is graded with the course's Block and keeps its marks."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_block": ("wrong values", "off by one")}
REPLACE = {
    "ex13_block": edited(
        "ex13",
        "ex13_block",
        [
            (
                "        a, _ = self.attn(self.ln_1(x), is_causal=True)  # (B, T, E)",
                "        L = x.shape[1]\n        a, _ = self.attn(self.ln_1(x), attn_mask=torch.ones(L, L, dtype=torch.bool).tril(1))",
            ),
        ],
    )
}

"""ex13: the original Transformer's post-norm order, LayerNorm(x + sublayer(x)). The SmallGPT
around it is graded with the course's Block and keeps its marks."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_block": ("wrong values", "post-norm")}
REPLACE = {
    "ex13_block": edited(
        "ex13",
        "ex13_block",
        [
            (
                "        a, _ = self.attn(self.ln_1(x), is_causal=True)  # (B, T, E)\n        x = x + a\n        return x + self.mlp(self.ln_2(x))",
                "        x = self.ln_1(x + self.attn(x, is_causal=True)[0])\n        return self.ln_2(x + self.mlp(x))",
            ),
        ],
    )
}

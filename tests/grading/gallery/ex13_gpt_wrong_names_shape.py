"""ex13: the submodules under names of one's own (tok_emb), so no state can be loaded."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_gpt": ("wrong shape", "parameter names")}
REPLACE = {
    "ex13_gpt": edited(
        "ex13",
        "ex13_gpt",
        [
            (
                "        self.wte = nn.Embedding(config.vocab_size, E)",
                "        self.tok_emb = nn.Embedding(config.vocab_size, E)",
            ),
            (
                "        self.lm_head.weight = self.wte.weight  # tied: one (V, E) matrix",
                "        self.lm_head.weight = self.tok_emb.weight  # tied: one (V, E) matrix",
            ),
            (
                "        x = self.wte(ids) + self.wpe.weight[:ids.shape[1]]  # (B, T, E) + (T, E)",
                "        x = self.tok_emb(ids) + self.wpe.weight[:ids.shape[1]]  # (B, T, E) + (T, E)",
            ),
        ],
    )
}

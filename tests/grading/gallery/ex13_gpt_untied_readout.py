"""ex13: the read-out is a matrix of its own, not the embedding (weights not tied)."""
NOTEBOOK = "ex13"
REPLACE = {"ex13_gpt": '''
class SmallGPT(nn.Module):
    """wte + wpe -> n_layer Blocks -> ln_f -> lm_head (tied to wte).

    Shape:
        ids: (B, L) int64. Returns logits (B, L, V).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        E = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, E)
        self.wpe = nn.Embedding(config.block_size, E)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(E, bias=config.bias)
        self.lm_head = nn.Linear(E, config.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe.weight[:ids.shape[1]]  # (B, L, E) + (L, E)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, L, E) -> (B, L, V)
'''}
EXPECT = {'ex13_gpt': ('wrong values', 'untied read-out')}

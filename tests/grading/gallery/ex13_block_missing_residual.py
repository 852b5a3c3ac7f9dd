"""ex13: the attention's output replaces the stream (no residual around it)."""
NOTEBOOK = "ex13"
REPLACE = {"ex13_block": '''
class MLP(nn.Module):
    """Linear(E, 4E) -> GELU -> Linear(4E, E), named fc and proj.

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        width = config.mlp_ratio * config.n_embd
        self.fc = nn.Linear(config.n_embd, width, bias=config.bias)
        self.proj = nn.Linear(width, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # (B, L, E) -> (B, L, 4E) -> (B, L, E)


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(ln_1(x)) (causal), then x + mlp(ln_2(x)).

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        E = config.n_embd
        self.ln_1 = nn.LayerNorm(E, bias=config.bias)
        self.attn = MultiHeadAttention(E, config.n_head, num_kv_heads=config.n_kv_head,
                                       bias=config.bias)
        self.ln_2 = nn.LayerNorm(E, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.attn(self.ln_1(x), is_causal=True)
        return x + self.mlp(self.ln_2(x))
'''}
EXPECT = {'ex13_block': ('wrong values', 'missing residual'), 'ex13_gpt': ('wrong values', 'Block')}

"""ex15: the MLA latent counted for keys and for values."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_kv_bytes_per_token": """
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, latent_dim, rope_dim, dtype):
    per_layer = 2 * num_kv_heads * head_dim if latent_dim is None else 2 * (latent_dim + rope_dim)
    return num_layers * per_layer * torch.empty((), dtype=dtype).element_size()
""",
}
EXPECT = {"ex15_kv_bytes_per_token": ("wrong values", "latent counted twice")}

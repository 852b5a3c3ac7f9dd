"""ex15: the dtype's bits used as its bytes."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_kv_bytes_per_token": """
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, latent_dim, rope_dim, dtype):
    per_layer = 2 * num_kv_heads * head_dim if latent_dim is None else latent_dim + rope_dim
    return num_layers * per_layer * torch.finfo(dtype).bits
""",
}
EXPECT = {"ex15_kv_bytes_per_token": ("wrong values", "bits, not bytes")}

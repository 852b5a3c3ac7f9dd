"""ex07: KV-cache bytes counted with the query heads H instead of the key/value heads G."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_kv_cache_bytes": """
def kv_cache_size(num_layers, num_heads, num_kv_heads, head_dim, seq_len, batch, dtype):
    return 2 * num_layers * num_heads * head_dim * torch.empty((), dtype=dtype).element_size() * seq_len * batch
"""
}
EXPECT = {
    "ex07_kv_cache_bytes": (
        "wrong values",
        "H instead of G: counted the query heads H instead of the key/value heads G",
    )
}

"""ex07: KV-cache bytes without the factor 2 (keys only, or values only)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_kv_cache_bytes": """
def kv_cache_size(num_layers, num_heads, num_kv_heads, head_dim, seq_len, batch, dtype):
    return num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size() * seq_len * batch
"""
}
EXPECT = {
    "ex07_kv_cache_bytes": (
        "wrong values",
        "no factor 2: missing the factor 2: the cache holds keys AND values",
    )
}

"""ex08: decode bytes counted with the query heads H instead of the key/value heads G."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_decode_kv_bytes": """
def decode_kv_bytes(batch, num_heads, num_kv_heads, head_dim, context, dtype):
    return batch * context * 2 * num_heads * head_dim * torch.empty((), dtype=dtype).element_size()
"""
}
EXPECT = {"ex08_decode_kv_bytes": ("wrong values", "H instead of G")}

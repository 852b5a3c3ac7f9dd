"""ex08: decode bytes assuming 4 bytes per number whatever the dtype."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_decode_kv_bytes": """
def decode_kv_bytes(batch, num_heads, num_kv_heads, head_dim, context, dtype):
    return batch * context * 2 * num_kv_heads * head_dim * 4
"""
}
EXPECT = {"ex08_decode_kv_bytes": ("wrong values", "assumed 4 bytes per number")}

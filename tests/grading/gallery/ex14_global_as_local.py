"""ex14: every layer counted as local."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_layout_bytes": """
def interleaved_cache_bytes(num_layers, global_every, window, num_sink, num_kv_heads, head_dim, seq_len,
                            batch, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    tokens = num_layers * min(seq_len, window + num_sink)
    return 2 * num_kv_heads * head_dim * tokens * batch * size
""",
}
EXPECT = {"ex14_layout_bytes": ("wrong values", "global layers counted as local")}

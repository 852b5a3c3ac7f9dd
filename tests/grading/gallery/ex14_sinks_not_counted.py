"""ex14: a local layer's sinks are not counted."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_layout_bytes": """
def interleaved_cache_bytes(num_layers, global_every, window, num_sink, num_kv_heads, head_dim, seq_len,
                            batch, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    n_global = num_layers // global_every
    tokens = n_global * seq_len + (num_layers - n_global) * min(seq_len, window)
    return 2 * num_kv_heads * head_dim * tokens * batch * size
""",
}
EXPECT = {"ex14_layout_bytes": ("wrong values", "sinks not counted")}

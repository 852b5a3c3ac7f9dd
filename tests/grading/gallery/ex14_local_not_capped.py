"""ex14: a local layer counts W + num_sink tokens even when seq_len is shorter."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_layout_bytes": """
def interleaved_cache_bytes(num_layers, global_every, window, num_sink, num_kv_heads, head_dim, seq_len,
                            batch, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    n_global = num_layers // global_every
    tokens = n_global * seq_len + (num_layers - n_global) * (window + num_sink)
    return 2 * num_kv_heads * head_dim * tokens * batch * size
""",
}
EXPECT = {"ex14_layout_bytes": ("wrong values", "local layers not capped")}

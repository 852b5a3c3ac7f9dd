"""ex06: heads split with a bare reshape (no transpose)."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_cross_attention": """
def cross_attention(query, memory, W_Q, W_K, W_V, W_O, num_heads, key_padding_mask=None):
    def split(x):
        B, T, E = x.shape
        return x.reshape(B, num_heads, T, E // num_heads)
    q, k, v = split(query @ W_Q.T), split(memory @ W_K.T), split(memory @ W_V.T)
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    heads = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return merge_heads(heads) @ W_O.T, heads
"""
}
EXPECT = {"ex06_cross_attention": ("wrong values", "split with view")}

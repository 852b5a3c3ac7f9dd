"""ex06: cross-attention forgets the key padding mask."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_cross_attention": """
def cross_attention(query, memory, W_Q, W_K, W_V, W_O, num_heads, key_padding_mask=None):
    q = split_heads(query @ W_Q.T, num_heads)
    k = split_heads(memory @ W_K.T, num_heads)
    v = split_heads(memory @ W_V.T, num_heads)
    heads = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads) @ W_O.T, heads
"""
}
EXPECT = {"ex06_cross_attention": ("wrong values", "padding mask ignored")}

"""ex07: gqa_forward lets torch's SDPA do the work (enable_gqa): forbidden for this item only."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_gqa_forward": """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):
    B, T, E = x.shape
    H, G = num_heads, num_kv_heads
    D = E // H
    q = (x @ W_Q.T).view(B, T, H, D).transpose(1, 2)
    k = (x @ W_K.T).view(B, T, G, D).transpose(1, 2)
    v = (x @ W_V.T).view(B, T, G, D).transpose(1, 2)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return heads.transpose(1, 2).reshape(B, T, E) @ W_O.T
"""
}
EXPECT = {"ex07_gqa_forward": ("forbidden API", "scaled_dot_product_attention")}

"""ex07: scores divided by sqrt(E) (the model width) instead of sqrt(D) (the head size)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_gqa_forward": """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):
    B, T, E = x.shape
    H, G = num_heads, num_kv_heads
    D = E // H
    q = (x @ W_Q.T).view(B, T, H, D).transpose(1, 2)
    k = repeat_kv_heads((x @ W_K.T).view(B, T, G, D).transpose(1, 2), H // G)
    v = repeat_kv_heads((x @ W_V.T).view(B, T, G, D).transpose(1, 2), H // G)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, T, E) @ W_O.T, weights
"""
}
EXPECT = {"ex07_gqa_forward": ("wrong values", "scaled by 1/sqrt(E)")}

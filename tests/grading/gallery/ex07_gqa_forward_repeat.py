"""ex07: gqa_forward expands key/value heads inline with repeat; only that item loses its marks."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_gqa_forward": """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):
    B, T, E = x.shape
    H, G = num_heads, num_kv_heads
    D = E // H
    q = (x @ W_Q.T).view(B, T, H, D).transpose(1, 2)
    k = (x @ W_K.T).view(B, T, G, D).transpose(1, 2).repeat(1, H // G, 1, 1)
    v = (x @ W_V.T).view(B, T, G, D).transpose(1, 2).repeat(1, H // G, 1, 1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, T, E) @ W_O.T, weights
"""
}
EXPECT = {"ex07_gqa_forward": ("wrong values", "repeat: key/value heads in the order 0, 1, 0, 1")}

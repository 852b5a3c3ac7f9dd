"""ex07: gqa_forward merges the heads but never applies W_O (named as ex04's is, issue 31)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_gqa_forward": """
def gqa_forward(x, W_Q, W_K, W_V, W_O, num_heads, num_kv_heads):
    B, T, E = x.shape
    H, G = num_heads, num_kv_heads
    D = E // H
    q = (x @ W_Q.T).view(B, T, H, D).transpose(1, 2)
    k = (x @ W_K.T).view(B, T, G, D).transpose(1, 2).repeat_interleave(H // G, dim=1)
    v = (x @ W_V.T).view(B, T, G, D).transpose(1, 2).repeat_interleave(H // G, dim=1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, T, E), weights
"""
}
EXPECT = {"ex07_gqa_forward": ("wrong values", "output projection W_O missing")}

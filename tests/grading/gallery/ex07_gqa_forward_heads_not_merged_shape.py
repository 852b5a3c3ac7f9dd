"""ex07: gqa_forward returns the per-head outputs (B, H, T, D): wrong shape, expected vs got in letters."""

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
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return weights @ v, weights
"""
}
EXPECT = {
    "ex07_gqa_forward": (
        "wrong shape",
        "expected shape (B, T, E) = (2, 5, 16), got (2, 4, 5, 4) — heads not merged",
    )
}

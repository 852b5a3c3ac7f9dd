"""ex04: the forward returns float64 for float32 input."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_mha_forward": """
def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):
    x, W_Q, W_K, W_V, W_O = (t.double() for t in (x, W_Q, W_K, W_V, W_O))
    q, k, v = (split_heads(x @ W, num_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    heads = scores.softmax(dim=-1) @ v
    return merge_heads(heads) @ W_O, heads
"""
}
EXPECT = {"ex04_mha_forward": ("wrong dtype", "float64 returned for float32 input")}

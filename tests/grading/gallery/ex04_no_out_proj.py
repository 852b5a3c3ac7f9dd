"""ex04: the heads are merged but W_O is never applied."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_mha_forward": """
def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):
    q, k, v = (split_heads(x @ W, num_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    heads = scores.softmax(dim=-1) @ v
    return merge_heads(heads), heads
"""
}
EXPECT = {"ex04_mha_forward": ("wrong values", "output projection W_O missing")}

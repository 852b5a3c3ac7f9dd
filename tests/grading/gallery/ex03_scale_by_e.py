"""ex03: the head divides the scores by sqrt(E) (the embedding size) instead of sqrt(D)."""

NOTEBOOK = "ex03"
REPLACE = {
    "ex03_head_forward": """
def self_attention_head(x, W_Q, W_K, W_V):
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
"""
}
EXPECT = {"ex03_head_forward": ("wrong values", "scaled by 1/sqrt(E)")}

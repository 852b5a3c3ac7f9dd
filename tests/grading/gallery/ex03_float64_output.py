"""ex03: the head returns float64 for float32 input (everything converted to float64 first)."""

NOTEBOOK = "ex03"
REPLACE = {
    "ex03_head_forward": """
def self_attention_head(x, W_Q, W_K, W_V):
    x, W_Q, W_K, W_V = (torch.as_tensor(t, dtype=torch.float64) for t in (x, W_Q, W_K, W_V))
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights @ v, weights
"""
}
EXPECT = {"ex03_head_forward": ("wrong dtype", "float64 returned for float32 input")}

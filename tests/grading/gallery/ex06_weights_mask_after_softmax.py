"""ex06: padded weights zeroed after the softmax."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_cross_weights": """
def cross_attention_weights(query, memory, W_Q, W_K, num_heads, key_padding_mask=None):
    q = split_heads(query @ W_Q.T, num_heads)
    k = split_heads(memory @ W_K.T, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if key_padding_mask is not None:
        weights = weights * ~key_padding_mask[:, None, None, :]
    return weights, scores
"""
}
EXPECT = {"ex06_cross_weights": ("wrong values", "mask after softmax")}

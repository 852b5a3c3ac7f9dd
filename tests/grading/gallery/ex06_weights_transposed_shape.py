"""ex06: weights returned as (B, H, S, L)."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_cross_weights": """
def cross_attention_weights(query, memory, W_Q, W_K, num_heads, key_padding_mask=None):
    q = split_heads(query @ W_Q.T, num_heads)
    k = split_heads(memory @ W_K.T, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1).transpose(-2, -1), scores.transpose(-2, -1)
"""
}
EXPECT = {"ex06_cross_weights": ("wrong shape", "transposed")}

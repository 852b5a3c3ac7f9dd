"""ex02: a hand-written softmax without the max trick: inf/NaN on large logits."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": """
def attention(query, key, value, attn_mask=None):
    scores = scaled_scores(query, key)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    e = torch.exp(scores)
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ value, weights
"""
}
EXPECT = {"ex02_attention": ("non-finite", "overflow")}

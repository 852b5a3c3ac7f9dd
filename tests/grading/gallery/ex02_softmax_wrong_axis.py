"""ex02: softmax over the queries (dim=-2) instead of the keys."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": """
def attention(query, key, value, attn_mask=None):
    scores = scaled_scores(query, key)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-2)
    return weights @ value, weights
"""
}
EXPECT = {"ex02_attention": ("wrong values", "wrong axis")}

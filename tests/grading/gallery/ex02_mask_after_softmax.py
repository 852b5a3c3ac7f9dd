"""ex02: the mask zeroes weights after the softmax (rows no longer sum to 1)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": """
def attention(query, key, value, attn_mask=None):
    weights = torch.softmax(scaled_scores(query, key), dim=-1)
    if attn_mask is not None:
        allowed = attn_mask if attn_mask.dtype == torch.bool else torch.isfinite(attn_mask)
        weights = weights * allowed
    return weights @ value, weights
"""
}
EXPECT = {"ex02_attention": ("wrong values", "mask after softmax")}

"""ex02: the bool mask is used the wrong way round (True taken as 'masked')."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": """
def attention(query, key, value, attn_mask=None):
    scores = scaled_scores(query, key)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
"""
}
EXPECT = {"ex02_attention": ("wrong values", "mask inverted")}

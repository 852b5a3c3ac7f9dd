"""ex02: float64 returned for float32 input."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": """
def attention(query, key, value, attn_mask=None):
    scores = scaled_scores(query.double(), key.double())
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value.double(), weights
"""
}
EXPECT = {"ex02_attention": ("wrong dtype", "float64 returned for float32 input")}

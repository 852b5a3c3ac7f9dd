"""ex06: the debug task handed in with the given bug: a key padding mask used as SDPA's attn_mask."""

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_fix_padded_sdpa": """
def padded_attention(q, k, v, key_padding_mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask[:, None, None, :])
"""
}
EXPECT = {"ex06_fix_padded_sdpa": ("wrong values", "padding mask inverted (the given bug)")}

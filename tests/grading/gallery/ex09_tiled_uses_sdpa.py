"""ex09: blockwise attention that calls torch's fused SDPA instead of tiling."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_tiled_attention": """
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
"""
}
EXPECT = {"ex09_tiled_attention": ("forbidden API", "scaled_dot_product_attention")}

"""ex05: decode step uses is_causal=True, which ignores the cache offset."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_decode_step": """
def decode_step(q_new, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=-2)
    v_all = torch.cat([v_cache, v_new], dim=-2)
    return F.scaled_dot_product_attention(q_new, k_all, v_all, is_causal=True), k_all, v_all
"""
}
EXPECT = {"ex05_decode_step": ("wrong values", "offset forgotten")}

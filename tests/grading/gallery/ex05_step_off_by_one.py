"""ex05: decode step: new tokens do not see themselves."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_decode_step": """
def decode_step(q_new, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=-2)
    v_all = torch.cat([v_cache, v_new], dim=-2)
    L, S_old = q_new.shape[-2], k_cache.shape[-2]
    mask = torch.ones(L, S_old + L, dtype=torch.bool).tril(diagonal=S_old - 1)
    return F.scaled_dot_product_attention(q_new, k_all, v_all, attn_mask=mask), k_all, v_all
"""
}
EXPECT = {"ex05_decode_step": ("wrong values", "off by one")}

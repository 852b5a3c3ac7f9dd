"""ex12: the whole key sequence (cache included) is rotated at 0 .. S-1, so cached keys turn twice."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_rope_decode_step": """
def rope_decode_step(q_new, k_new, v_new, k_cache, v_cache):
    S_old, L = k_cache.shape[-2], q_new.shape[-2]
    q = rope(q_new, torch.arange(S_old, S_old + L), "half")[0]
    k = rope(torch.cat([k_cache, k_new], dim=-2), torch.arange(S_old + L), "half")[0]
    v = torch.cat([v_cache, v_new], dim=-2)
    mask = torch.ones(L, S_old + L, dtype=torch.bool).tril(diagonal=S_old)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""
}
EXPECT = {"ex12_rope_decode_step": ("wrong values", "cache rotated again")}

"""ex12: the new tokens are rotated at positions 0 .. L-1, ignoring the cache length; only the
decoding step loses its marks."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_rope_decode_step": """
def rope_decode_step(q_new, k_new, v_new, k_cache, v_cache):
    S_old, L = k_cache.shape[-2], q_new.shape[-2]
    positions = torch.arange(L)
    q = rope(q_new, positions, "half")[0]
    k = torch.cat([k_cache, rope(k_new, positions, "half")[0]], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    mask = torch.ones(L, S_old + L, dtype=torch.bool).tril(diagonal=S_old)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""
}
EXPECT = {"ex12_rope_decode_step": ("wrong values", "positions not offset by the cache")}

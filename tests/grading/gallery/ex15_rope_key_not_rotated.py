"""ex15: the rotary key is cached without RoPE."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_latent_step": """
def latent_cache_step(x, W_DKV, W_KR, latent_cache, rope_cache):
    S_old, L = latent_cache.shape[1], x.shape[1]
    c = x @ W_DKV.T
    k_r = x @ W_KR.T
    return torch.cat([latent_cache, c], dim=1), torch.cat([rope_cache, k_r], dim=1)
""",
}
EXPECT = {"ex15_latent_step": ("wrong values", "rotary key not rotated")}

"""ex15: the new rotary keys are rotated at 0 .. L-1."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_latent_step": """
def latent_cache_step(x, W_DKV, W_KR, latent_cache, rope_cache):
    S_old, L = latent_cache.shape[1], x.shape[1]
    c = x @ W_DKV.T
    k_r = apply_rope((x @ W_KR.T)[:, None], torch.arange(L))[:, 0]
    return torch.cat([latent_cache, c], dim=1), torch.cat([rope_cache, k_r], dim=1)
""",
}
EXPECT = {"ex15_latent_step": ("wrong values", "positions not offset")}

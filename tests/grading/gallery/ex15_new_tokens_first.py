"""ex15: the new tokens are put before the cached ones."""

NOTEBOOK = "ex15"
REPLACE = {
    "ex15_latent_step": """
def latent_cache_step(x, W_DKV, W_KR, latent_cache, rope_cache):
    S_old, L = latent_cache.shape[1], x.shape[1]
    c = x @ W_DKV.T
    k_r = apply_rope((x @ W_KR.T)[:, None], torch.arange(S_old, S_old + L))[:, 0]
    return torch.cat([c, latent_cache], dim=1), torch.cat([k_r, rope_cache], dim=1)
""",
}
EXPECT = {"ex15_latent_step": ("wrong values", "wrong order")}

"""ex19: the causal mask from block-local indices (0 .. L-1 against 0 .. S-1): every block looks
like the diagonal one."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_step": """
def ring_step(out, lse, query, key, value, q_pos, k_pos, is_causal, scale):
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(scores - m)
    total = p.sum(-1, keepdim=True)
    block_out = (p @ value) / torch.where(total > 0, total, torch.ones_like(total))
    return merge_safe(out, lse, block_out, (m + torch.log(total))[..., 0])
""",
}
EXPECT = {"ex19_ring_step": ("wrong values", "causal mask from block-local indices")}

"""ex19: the block's partial from torch.softmax and torch.logsumexp: an all-masked row (a block in
the query's future) gives NaN weights; the merge itself is right."""

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_step": """
def ring_step(out, lse, query, key, value, q_pos, k_pos, is_causal, scale):
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    block_lse = torch.logsumexp(scores, -1)
    return merge_safe(out, lse, torch.softmax(scores, -1) @ value, block_lse)
""",
}
EXPECT = {"ex19_ring_step": ("wrong values", "NaN from an empty partial")}

"""ex10: a head's features taken as every H-th feature instead of a contiguous block of D."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_prune_weights": """
def prune_query_heads(W_Q, b_Q, W_O, num_heads, drop):
    D = W_Q.shape[0] // num_heads
    dropped = set(drop.tolist())
    keep = torch.tensor([d * num_heads + h for h in range(num_heads) if h not in dropped
                         for d in range(D)])
    return W_Q[keep], b_Q[keep], W_O[:, keep]
"""
}
EXPECT = {"ex10_prune_weights": ("wrong values", "strided features")}

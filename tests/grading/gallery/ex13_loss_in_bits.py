"""ex13: the loss computed with log2 (bits), reported as if it were nats."""

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_next_token_loss": """
def next_token_loss(logits, ids):
    p = torch.softmax(logits[:, :-1], dim=-1)
    picked = p.gather(-1, ids[:, 1:, None])[..., 0]
    return -torch.log2(picked).mean()
"""
}
EXPECT = {"ex13_next_token_loss": ("wrong values", "bits instead of nats")}

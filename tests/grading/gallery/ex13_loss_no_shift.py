"""ex13: the loss compares each position with its own token (no shift by one)."""

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_next_token_loss": """
def next_token_loss(logits, ids):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), ids.reshape(-1))
"""
}
EXPECT = {"ex13_next_token_loss": ("wrong values", "off by one")}

"""ex13: perplexity as 2 ** (a natural-log loss): log base confusion."""

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_perplexity": """
def perplexity(logits, targets):
    V = logits.shape[-1]
    return 2.0 ** F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
"""
}
EXPECT = {"ex13_perplexity": ("wrong values", "2 ** nats")}

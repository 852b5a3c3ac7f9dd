"""ex13: top-k sets the other logits to 0 instead of -inf, so they keep some probability."""

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_sampling_probs": """
def sampling_probs(logits, temperature, top_k):
    z = logits / temperature
    kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
    return torch.softmax(torch.where(z < kth, torch.zeros_like(z), z), dim=-1)
"""
}
EXPECT = {"ex13_sampling_probs": ("wrong values", "filtered to zero")}

"""ex05: greedy loop recomputes the whole prefix every step (right tokens, O(T^2) work)."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_greedy_generate": """
def greedy_generate(model, prompt, n_new):
    ids = prompt
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids
"""
}
EXPECT = {"ex05_greedy_generate": ("wrong values", "no cache used")}

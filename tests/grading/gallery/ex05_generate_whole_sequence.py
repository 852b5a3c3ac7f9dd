"""ex05: greedy loop feeds the whole sequence to a cache that already holds it."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_greedy_generate": """
def greedy_generate(model, prompt, n_new):
    caches = model.new_caches()
    ids = prompt
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids, caches)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids
"""
}
EXPECT = {"ex05_greedy_generate": ("wrong values", "whole sequence fed")}

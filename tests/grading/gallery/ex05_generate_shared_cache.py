"""ex05: greedy loop shares one KVCache between all layers."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_greedy_generate": """
from mha_course import KVCache


def greedy_generate(model, prompt, n_new):
    caches = [KVCache()] * model.num_layers
    ids, step_input = prompt, prompt
    for _ in range(n_new):
        next_id = model(step_input, caches)[:, -1].argmax(-1, keepdim=True)
        ids, step_input = torch.cat([ids, next_id], dim=1), next_id
    return ids
"""
}
EXPECT = {"ex05_greedy_generate": ("wrong values", "one cache for all layers")}

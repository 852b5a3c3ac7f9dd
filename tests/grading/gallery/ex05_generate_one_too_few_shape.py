"""ex05: greedy loop stops one token early."""

NOTEBOOK = "ex05"
REPLACE = {
    "ex05_greedy_generate": """
def greedy_generate(model, prompt, n_new):
    caches = model.new_caches()
    ids, step_input = prompt, prompt
    for _ in range(n_new - 1):
        next_id = model(step_input, caches)[:, -1].argmax(-1, keepdim=True)
        ids, step_input = torch.cat([ids, next_id], dim=1), next_id
    return ids
"""
}
EXPECT = {"ex05_greedy_generate": ("wrong shape", "one token too few")}

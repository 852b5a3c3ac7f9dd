"""ex10: one (layers, H) mask for the whole batch: the summed gradient, not one per example."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_head_mask_grads": """
def per_example_head_grads(model, tokens, targets, loss_fn):
    xi = torch.ones(model.num_layers, model.num_heads, dtype=torch.float64, requires_grad=True)
    logits = model(tokens, head_mask=xi)
    sum(loss_fn(logits[b:b + 1], targets[b:b + 1]) for b in range(tokens.shape[0])).backward()
    return xi.grad
"""
}
EXPECT = {"ex10_head_mask_grads": ("wrong shape", "one mask for the batch")}

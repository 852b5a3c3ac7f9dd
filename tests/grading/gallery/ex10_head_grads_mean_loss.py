"""ex10: per-example gradients from the batch-MEAN loss: every gradient divided by B."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_head_mask_grads": """
def per_example_head_grads(model, tokens, targets, loss_fn):
    B = tokens.shape[0]
    xi = torch.ones(model.num_layers, B, model.num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(model(tokens, head_mask=xi), targets).backward()
    return xi.grad.transpose(0, 1)
"""
}
EXPECT = {"ex10_head_mask_grads": ("wrong values", "mean loss")}

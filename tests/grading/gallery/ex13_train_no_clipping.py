"""ex13: the gradients are never clipped."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_train_steps": ("wrong values", "not clipped")}
REPLACE = {
    "ex13_train_steps": edited(
        "ex13",
        "ex13_train_steps",
        [
            ("        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)\n", ""),
        ],
    )
}

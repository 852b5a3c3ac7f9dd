"""ex13: the gradients are never reset between steps."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_train_steps": ("wrong values", "gradients accumulate")}
REPLACE = {
    "ex13_train_steps": edited(
        "ex13",
        "ex13_train_steps",
        [
            ("        opt.zero_grad(set_to_none=True)\n", ""),
        ],
    )
}

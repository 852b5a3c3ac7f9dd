"""ex13: the warm-up starts at 0 (learning_rate * step / warmup_iters)."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_train_steps": ("wrong values", "warm-up off by one")}
REPLACE = {
    "ex13_train_steps": edited(
        "ex13",
        "ex13_train_steps",
        [
            (
                "            return tc.learning_rate * (step + 1) / (tc.warmup_iters + 1)",
                "            return tc.learning_rate * step / tc.warmup_iters",
            ),
        ],
    )
}

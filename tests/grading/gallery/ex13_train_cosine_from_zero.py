"""ex13: the cosine's progress counted from step 0, not from the end of the warm-up."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_train_steps": ("wrong values", "schedule off by the warm-up")}
REPLACE = {
    "ex13_train_steps": edited(
        "ex13",
        "ex13_train_steps",
        [
            (
                "        progress = (step - tc.warmup_iters) / max(1, decay - tc.warmup_iters)",
                "        progress = step / decay",
            ),
        ],
    )
}

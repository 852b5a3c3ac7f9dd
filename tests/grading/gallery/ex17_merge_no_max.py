"""ex17: the merged log-sum-exp as log(exp(lse_a) + exp(lse_b)): exp overflows float32 once a
log-sum-exp passes 88."""

from gallery_edits import edited

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_lse_merge": edited(
        "ex17",
        "ex17_lse_merge",
        [("torch.logaddexp(lse_a, lse_b)", "torch.log(torch.exp(lse_a) + torch.exp(lse_b))")],
    )
}
EXPECT = {"ex17_lse_merge": ("wrong values", "without the larger one subtracted first")}

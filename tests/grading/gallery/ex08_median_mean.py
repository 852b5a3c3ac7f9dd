"""ex08: the mean instead of the median (one slow run pulls it up)."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_median_iqr": """
def median_and_iqr(samples_ms):
    x = samples_ms.double()
    q1, q3 = torch.quantile(x, 0.25), torch.quantile(x, 0.75)
    return x.mean(), q3 - q1
"""
}
EXPECT = {"ex08_median_iqr": ("wrong values", "mean instead of median")}

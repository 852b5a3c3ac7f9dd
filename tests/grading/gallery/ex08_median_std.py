"""ex08: the standard deviation instead of the inter-quartile range."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_median_iqr": """
def median_and_iqr(samples_ms):
    x = samples_ms.double()
    return torch.quantile(x, 0.5), x.std()
"""
}
EXPECT = {"ex08_median_iqr": ("wrong values", "standard deviation")}

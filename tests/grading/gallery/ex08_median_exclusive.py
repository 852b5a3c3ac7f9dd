"""ex08: quartiles by statistics.quantiles' default ('exclusive') method."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_median_iqr": """
import statistics


def median_and_iqr(samples_ms):
    xs = samples_ms.tolist()
    q1, median, q3 = statistics.quantiles(xs, n=4)
    return statistics.median(xs), q3 - q1
"""
}
EXPECT = {"ex08_median_iqr": ("wrong values", "exclusive quartiles")}

"""ex07: the smallest cache chosen by the query heads H."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_smallest_cache": """
def smallest_cache(configs):
    layers, H, G, D, size = configs.long().unbind(dim=-1)
    return int((2 * layers * H * D * size).argmin())
"""
}
EXPECT = {"ex07_smallest_cache": ("wrong values", "H instead of G")}

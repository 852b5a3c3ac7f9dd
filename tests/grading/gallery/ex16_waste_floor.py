"""ex16: floor division: the last partly filled block dropped."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_cache_waste": """
def cache_waste(lengths, block_size, max_len):
    used = int(lengths.sum())
    blocks = lengths // block_size
    return int((blocks * block_size).sum()) - used, len(lengths) * max_len - used
""",
}
EXPECT = {"ex16_cache_waste": ("wrong values", "floor division")}

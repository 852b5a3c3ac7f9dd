"""ex16: preallocated to the longest length instead of max_len."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_cache_waste": """
def cache_waste(lengths, block_size, max_len):
    used = int(lengths.sum())
    blocks = -(-lengths // block_size)
    return int((blocks * block_size).sum()) - used, len(lengths) * int(lengths.max()) - used
""",
}
EXPECT = {"ex16_cache_waste": ("wrong values", "preallocated to the longest")}

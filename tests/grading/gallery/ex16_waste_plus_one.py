"""ex16: l // bs + 1 blocks: one too many when bs divides l."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_cache_waste": """
def cache_waste(lengths, block_size, max_len):
    used = int(lengths.sum())
    blocks = lengths // block_size + 1
    return int((blocks * block_size).sum()) - used, len(lengths) * max_len - used
""",
}
EXPECT = {"ex16_cache_waste": ("wrong values", "one block too many")}

"""ex16: the offset measured from the physical block's first slot."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_block_lookup": """
def block_lookup(block_table, positions, block_size):
    block = block_table[positions // block_size]
    return block, positions - block * block_size
""",
}
EXPECT = {"ex16_block_lookup": ("wrong values", "offset from the physical block")}

"""ex16: the table indexed with the offset, the block index returned as offset."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_block_lookup": """
def block_lookup(block_table, positions, block_size):
    return block_table[positions % block_size], positions // block_size
""",
}
EXPECT = {"ex16_block_lookup": ("wrong values", "block offset confusion")}

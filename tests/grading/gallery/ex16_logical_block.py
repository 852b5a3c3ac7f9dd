"""ex16: the logical block returned, the table not used."""

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_block_lookup": """
def block_lookup(block_table, positions, block_size):
    return positions // block_size, positions % block_size
""",
}
EXPECT = {"ex16_block_lookup": ("wrong values", "logical block")}

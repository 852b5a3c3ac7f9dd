"""ex18: block kinds from the tiles' in-range pairs only, so a ragged edge tile whose in-range pairs
are all allowed is called full."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_block_kinds": """
def block_kinds(mask, block):
    L, S = mask.shape
    nq, nk = -(-L // block), -(-S // block)
    kinds = torch.zeros(nq, nk, dtype=torch.long)
    for r in range(nq):
        for c in range(nk):
            tile = mask[r * block:(r + 1) * block, c * block:(c + 1) * block]
            kinds[r, c] = int(tile.any()) + int(tile.all())
    return kinds
"""
}
EXPECT = {"ex18_block_kinds": ("wrong values", "edge full")}

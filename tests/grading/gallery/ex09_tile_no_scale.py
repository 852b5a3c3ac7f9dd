"""ex09: the tile's scores are not divided by sqrt(D) (the blockwise pass that calls the tile
step is graded with the course's own and keeps its marks)."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_tile_step": """
def tile_step(q_block, k_block, v_block, m, row_sum, acc, q_start, k_start, is_causal):
    scores = q_block @ k_block.transpose(-2, -1)
    if is_causal:
        rows = q_start + torch.arange(q_block.shape[-2])
        cols = k_start + torch.arange(k_block.shape[-2])
        scores = scores.masked_fill(cols > rows.unsqueeze(-1), float("-inf"))
    return online_update(m, row_sum, acc, scores, v_block)
"""
}
EXPECT = {
    "ex09_tile_step": ("wrong values", "no scaling"),
}

"""ex09: each query block's output is acc, never divided by row_sum."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_tiled_attention": """
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    L, S, Dv = query.shape[-2], key.shape[-2], value.shape[-1]
    lead = query.shape[:-2]
    out = query.new_empty(*lead, L, Dv)
    lse = query.new_empty(*lead, L)
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        m = query.new_full((*lead, i1 - i0), float("-inf"))
        row_sum, acc = query.new_zeros((*lead, i1 - i0)), query.new_zeros((*lead, i1 - i0, Dv))
        for j0 in range(0, S, block_k):
            j1 = min(j0 + block_k, S)
            m, row_sum, acc = tile_step(query[..., i0:i1, :], key[..., j0:j1, :],
                                        value[..., j0:j1, :], m, row_sum, acc, i0, j0, is_causal)
        out[..., i0:i1, :] = acc
        lse[..., i0:i1] = m + torch.log(row_sum)
    return out, lse
"""
}
EXPECT = {"ex09_tiled_attention": ("wrong values", "not normalised")}

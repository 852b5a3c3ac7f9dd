"""ex04: the debug task handed in with the given bug: heads merged as (B, T, D, H)."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_fix_packed_mha": """
def packed_mha(x, in_proj_weight, out_proj_weight, num_heads):
    B, T, E = x.shape
    D = E // num_heads
    q, k, v = (x @ in_proj_weight.T).chunk(3, dim=-1)
    q, k, v = (t.view(B, T, num_heads, D).transpose(1, 2) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1) @ v
    merged = heads.permute(0, 2, 3, 1).reshape(B, T, E)
    return merged @ out_proj_weight.T, heads
"""
}
EXPECT = {"ex04_fix_packed_mha": ("wrong values", "interleaved (the given bug)")}

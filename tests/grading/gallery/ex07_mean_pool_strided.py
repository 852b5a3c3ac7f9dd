"""ex07: heads pooled in strided groups (g, g + G, ...) instead of contiguous ones."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_mean_pool_kv": """
def mean_pool_kv(weight, num_heads, num_kv_heads):
    H, G = num_heads, num_kv_heads
    D, rest = weight.shape[0] // H, weight.shape[1:]
    return weight.reshape(H // G, G, D, *rest).mean(dim=0).reshape(G * D, *rest)
"""
}
EXPECT = {"ex07_mean_pool_kv": ("wrong values", "strided groups: pooled heads g, g + G")}

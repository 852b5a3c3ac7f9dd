"""ex07: the (G, D, ...) means are returned without flattening back to (G * D, ...)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_mean_pool_kv": """
def mean_pool_kv(weight, num_heads, num_kv_heads):
    H, G = num_heads, num_kv_heads
    return weight.reshape(G, H // G, weight.shape[0] // H, *weight.shape[1:]).mean(dim=1)
"""
}
EXPECT = {
    "ex07_mean_pool_kv": (
        "wrong shape",
        "expected shape (G * D, ...) = (8, 16), got (2, 4, 16) — not flattened",
    )
}

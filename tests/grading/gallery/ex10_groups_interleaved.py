"""ex10: query head h assigned to key/value head h % G (interleaved) instead of h // (H/G)."""

NOTEBOOK = "ex10"
REPLACE = {
    "ex10_kv_groups_kept": """
def kv_groups_kept(num_heads, num_kv_heads, drop):
    dropped = set(drop.tolist())
    return torch.tensor([any(h not in dropped for h in range(num_heads) if h % num_kv_heads == g)
                         for g in range(num_kv_heads)])
"""
}
EXPECT = {"ex10_kv_groups_kept": ("wrong values", "interleaved groups")}

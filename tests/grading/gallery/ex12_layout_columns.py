"""ex12: fix_checkpoint permutes the columns (input features) of the q/k weights head by head, not the rows."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    D = state_dict["q_proj.weight"].shape[0] // num_heads
    fixed = dict(state_dict)
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    cols = torch.cat([h * D + perm for h in range(num_heads)])  # over E = H * D
    for name, heads in (("q_proj", num_heads), ("k_proj", num_kv_heads)):
        fixed[f"{name}.weight"] = state_dict[f"{name}.weight"][:, cols]
        b = state_dict[f"{name}.bias"]
        fixed[f"{name}.bias"] = b.reshape(heads, D)[:, perm].reshape(-1)
    return fixed
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "columns, not rows")}

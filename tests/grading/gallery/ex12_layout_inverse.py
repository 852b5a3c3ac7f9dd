"""ex12: fix_checkpoint applies the inverse permutation (argsort of interleaved -> half) by hand."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    D = state_dict["q_proj.weight"].shape[0] // num_heads
    fixed = dict(state_dict)
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    inv = torch.argsort(perm)
    for name, heads in (("q_proj", num_heads), ("k_proj", num_kv_heads)):
        for part in ("weight", "bias"):
            t = state_dict[f"{name}.{part}"]
            fixed[f"{name}.{part}"] = t.reshape(heads, D, *t.shape[1:])[:, inv].reshape(t.shape)
    return fixed
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "inverse permutation")}

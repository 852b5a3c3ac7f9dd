"""ex12: fix_checkpoint converts q_proj and v_proj, leaving k_proj in the exported layout."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    D = state_dict["q_proj.weight"].shape[0] // num_heads
    fixed = dict(state_dict)
    for name, heads in (("q_proj", num_heads), ("v_proj", num_kv_heads)):
        for part in ("weight", "bias"):
            fixed[f"{name}.{part}"] = mha_course.convert_rope_layout(state_dict[f"{name}.{part}"], heads, D, to="half")
    return fixed
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "v instead of k")}

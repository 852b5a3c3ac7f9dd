"""ex12: fix_checkpoint converts the q/k weights but not their biases."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    D = state_dict["q_proj.weight"].shape[0] // num_heads
    fixed = dict(state_dict)
    for name, heads in (("q_proj", num_heads), ("k_proj", num_kv_heads)):
        fixed[f"{name}.weight"] = mha_course.convert_rope_layout(state_dict[f"{name}.weight"], heads, D, to="half")
    return fixed
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "biases left")}

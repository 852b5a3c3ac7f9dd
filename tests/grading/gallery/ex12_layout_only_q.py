"""ex12: fix_checkpoint converts q_proj only."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    D = state_dict["q_proj.weight"].shape[0] // num_heads
    fixed = dict(state_dict)
    for part in ("weight", "bias"):
        fixed[f"q_proj.{part}"] = mha_course.convert_rope_layout(state_dict[f"q_proj.{part}"], num_heads, D, to="half")
    return fixed
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "only the queries")}

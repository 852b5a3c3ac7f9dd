"""ex12: fix_checkpoint returns the checkpoint as it came (the bug not found)."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    return dict(state_dict)
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "checkpoint unchanged")}

"""ex12: fix_checkpoint leaves the checkpoint as it came and patches the model's RoPE to rotate
the 'interleaved' layout instead: the forward pass in the learner's process then matches, but the
parent also compares the q/k weights the model loaded, so the item is lost (issue 19, class 9)."""

NOTEBOOK = "ex12"
REPLACE = {
    "ex12_layout_bug": """
import mha_course.attention.mha

def fix_checkpoint(state_dict, num_heads, num_kv_heads):
    real = mha_course.attention.mha.apply_rope
    mha_course.attention.mha.apply_rope = lambda x, p, layout="half", base=10000.0: real(x, p, layout="interleaved", base=base)
    return dict(state_dict)
"""
}
EXPECT = {"ex12_layout_bug": ("wrong values", "checkpoint unchanged")}

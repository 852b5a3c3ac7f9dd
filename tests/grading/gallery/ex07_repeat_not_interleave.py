"""ex07: key/value heads copied with repeat (0, 1, 0, 1) instead of repeat_interleave (0, 0, 1, 1).
The solution's gqa_forward calls repeat_kv_heads: graded with the course's own, it keeps its marks."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_repeat_kv": """
def repeat_kv_heads(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
"""
}
EXPECT = {
    "ex07_repeat_kv": ("wrong values", "key/value heads in the order 0, 1, 0, 1"),
}

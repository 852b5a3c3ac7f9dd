"""ex07: heads repeated along the sequence axis: wrong shape, named in dimension letters (the
forward that calls it is graded with the course's own and keeps its marks)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_repeat_kv": """
def repeat_kv_heads(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)
"""
}
EXPECT = {
    "ex07_repeat_kv": (
        "wrong shape",
        "expected shape (B, G * n_rep, S, D) = (2, 6, 5, 4), "
        "got (2, 2, 15, 4) — wrong axis: repeated along the sequence axis S",
    ),
}

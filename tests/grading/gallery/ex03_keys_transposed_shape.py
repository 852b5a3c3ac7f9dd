"""ex03: keys returned transposed, (B, D, T): the wrong shape, named in dimension letters."""

NOTEBOOK = "ex03"
REPLACE = {
    "ex03_project_qkv": """
def project_qkv(x, W_Q, W_K, W_V):
    return x @ W_Q, (x @ W_K).transpose(-2, -1), x @ W_V
"""
}
EXPECT = {
    "ex03_project_qkv": (
        "wrong shape",
        "output 1: expected shape (B, T, D) = (2, 5, 3), got (2, 3, 5)",
    )
}

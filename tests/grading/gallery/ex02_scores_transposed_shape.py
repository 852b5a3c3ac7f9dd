"""ex02: key @ queryᵀ gives (..., S, L): wrong shape, named in dimension letters (the attention
built on them is graded with the course's own and keeps its marks)."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_scaled_scores": """
def scaled_scores(query, key):
    return key @ query.transpose(-2, -1) / math.sqrt(query.shape[-1])
"""
}
EXPECT = {
    "ex02_scaled_scores": (
        "wrong shape",
        "expected shape (..., L, S) = (2, 3, 5, 7), got (2, 3, 7, 5)",
    ),
}

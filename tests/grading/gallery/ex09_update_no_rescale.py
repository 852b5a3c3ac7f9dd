"""ex09: the running sum and output are not rescaled when the maximum grows (the later
steps that call the update are graded with the course's own and keep their marks)."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_online_update": """
def online_update(m, row_sum, acc, scores, value):
    m_new = torch.maximum(m, scores.amax(dim=-1))
    p = torch.exp(scores - m_new.unsqueeze(-1))
    return m_new, row_sum + p.sum(dim=-1), acc + p @ value
"""
}
EXPECT = {
    "ex09_online_update": ("wrong values", "no rescaling"),
}

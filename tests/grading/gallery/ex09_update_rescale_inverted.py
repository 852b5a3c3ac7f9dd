"""ex09: alpha = exp(m_new - m) instead of exp(m - m_new) (inf on the first block);
the later steps that call it are graded with the course's own update and keep their marks."""

NOTEBOOK = "ex09"
REPLACE = {
    "ex09_online_update": """
def online_update(m, row_sum, acc, scores, value):
    m_new = torch.maximum(m, scores.amax(dim=-1))
    alpha = torch.exp(m_new - m)
    p = torch.exp(scores - m_new.unsqueeze(-1))
    return m_new, alpha * row_sum + p.sum(dim=-1), alpha.unsqueeze(-1) * acc + p @ value
"""
}
EXPECT = {
    "ex09_online_update": ("wrong values", "rescale inverted"),
}

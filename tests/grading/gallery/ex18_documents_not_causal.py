"""ex18: document masking without the causal condition."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_document_mask": """
def document_mask(q_idx, kv_idx, doc_ids):
    return doc_ids[q_idx] == doc_ids[kv_idx]
"""
}
EXPECT = {"ex18_document_mask": ("wrong values", "not causal")}

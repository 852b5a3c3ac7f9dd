"""ex18: the lecture's prefix_lm inside the document mask: the prefix counted from position 0 of
the packed sequence, not from each document's first token."""

NOTEBOOK = "ex18"
REPLACE = {
    "ex18_document_prefix": """
def document_prefix_mask(q_idx, kv_idx, doc_ids, prefix_len):
    return (doc_ids[q_idx] == doc_ids[kv_idx]) & ((kv_idx < prefix_len) | (q_idx >= kv_idx))
"""
}
EXPECT = {"ex18_document_prefix": ("wrong values", "prefix from the sequence start")}

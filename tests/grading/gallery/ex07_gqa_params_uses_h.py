"""ex07: W_K and W_V counted H heads wide (the MHA count)."""

NOTEBOOK = "ex07"
REPLACE = {
    "ex07_predict_gqa_params": """
def predict_gqa_params(E, num_heads, num_kv_heads, bias):
    return 4 * E * E + (4 * E if bias else 0)
"""
}
EXPECT = {"ex07_predict_gqa_params": ("wrong values", "H instead of G")}

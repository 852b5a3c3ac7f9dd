"""ex08: attention FLOPs not halved for causal attention."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_attention_flops": """
def count_attention_flops(B, H, L, S, D, causal):
    return 4 * B * H * L * S * D
"""
}
EXPECT = {"ex08_attention_flops": ("wrong values", "causal not halved")}

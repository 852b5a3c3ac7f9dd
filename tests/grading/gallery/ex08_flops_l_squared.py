"""ex08: attention FLOPs with L·L instead of L·S (wrong for decode and cross-attention)."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_attention_flops": """
def count_attention_flops(B, H, L, S, D, causal):
    flops = 4 * B * H * L * L * D
    return flops // 2 if causal else flops
"""
}
EXPECT = {"ex08_attention_flops": ("wrong values", "L squared")}

"""ex08: attention FLOPs counting a multiply-add as one FLOP (half the count)."""

NOTEBOOK = "ex08"
REPLACE = {
    "ex08_attention_flops": """
def count_attention_flops(B, H, L, S, D, causal):
    flops = 2 * B * H * L * S * D
    return flops // 2 if causal else flops
"""
}
EXPECT = {"ex08_attention_flops": ("wrong values", "one matmul: half the count")}

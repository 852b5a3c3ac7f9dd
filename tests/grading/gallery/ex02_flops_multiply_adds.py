"""ex02: the FLOPs prediction counts multiply-adds, not FLOPs."""

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_predict_flops": """
def predict_attention_flops(B, H, L, S, D, Dv):
    return B * H * L * S * (D + Dv)
"""
}
EXPECT = {"ex02_predict_flops": ("wrong values", "multiply-adds")}

"""ex04: the parameter count is one head's worth (it should not depend on H)."""

NOTEBOOK = "ex04"
REPLACE = {
    "ex04_mha_params": """
def mha_param_count(E, num_heads, bias):
    D = E // num_heads
    return 4 * E * D + (4 * D if bias else 0)
"""
}
EXPECT = {"ex04_mha_params": ("wrong values", "does not depend on H")}

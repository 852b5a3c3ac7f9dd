"""ex03: the parameter count ignores the biases."""

NOTEBOOK = "ex03"
REPLACE = {
    "ex03_head_params": """
def head_param_count(E, D, bias):
    return 3 * E * D
"""
}
EXPECT = {"ex03_head_params": ("wrong values", "bias forgotten")}

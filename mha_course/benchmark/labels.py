"""Chapter 8: the names of the benchmark's variants, written once.

Result rows are looked up by these names — ``targets`` picks each ratio's numerator and
denominator, ``sweep`` decides which rows hold materialised scores, tests and plots group by
them — so a name typed twice could drift apart silently; import it from here instead.
"""

from __future__ import annotations

# kernel level: random Q, K, V (B, H, L, D)
COURSE_NAIVE = "course naive eager"
BARE_EAGER = "bare matmul-softmax-matmul"
SDPA_FORCED_PREFIX = "SDPA ["
SDPA_AUTO = "SDPA (torch's choice)"
COMPILED_COURSE = "torch.compile(course naive)"
FLEX_COMPILED = "FlexAttention (compiled)"

# module level: X (B, L, E) with the same weights
COURSE_MODULE_EAGER = "course MHA impl=eager"
COURSE_MODULE_SDPA = "course MHA impl=sdpa"
BARE_SDPA_MODULE = "bare SDPA + projections"
TORCH_MHA_WEIGHTS = "nn.MultiheadAttention need_weights=True"
TORCH_MHA_FAST = "nn.MultiheadAttention need_weights=False"

# decode: how many key/value heads
MHA = "MHA"
GQA_PREFIX = "GQA"
MQA = "MQA"


def sdpa_forced(backend: str) -> str:
    """``"SDPA [flash]"``: torch's SDPA with one backend forced (starts with SDPA_FORCED_PREFIX)."""
    return f"{SDPA_FORCED_PREFIX}{backend}]"


def gqa(G: int) -> str:
    """``"GQA (G=8)"``: grouped-query decode with G key/value heads (starts with GQA_PREFIX)."""
    return f"{GQA_PREFIX} (G={G})"

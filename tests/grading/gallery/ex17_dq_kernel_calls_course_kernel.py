"""ex17 (optional dQ kernel): the course's own dQ kernel called from the learner's.
Before: the tripwire named the course's kernel (forbidden API); now the kernel is compiled
alone first (issue #30, route 3) and ``course`` is no name there: it does not compile."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_triton_dq": """
import triton
import triton.language as tl

import mha_course.kernels.triton_flash as course


@triton.jit
def flash_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, L, S, D, H, G,
                    IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr):
    course._bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, L, S, D, H, G, IS_CAUSAL, BLOCK_M,
                          BLOCK_N, BLOCK_D)
"""
}
EXPECT = {"ex17_triton_dq": ("not compiled", "does not compile at line 11 of cell 15")}

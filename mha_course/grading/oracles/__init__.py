"""Parent-only references that are more than a formula: ex17's Triton forward and dQ items
(cases, float64 oracles, known-wrong kernels), ex16's serving reference and ex12's layout bug.
Never staged into a sandbox.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

"""Parent-only references that are more than a formula: ex17's Triton forward and dQ items
(cases, float64 oracles, known-wrong kernels), ex16's serving reference, ex12's layout bug, ex19's
ring service, and the cases, references and mistake variants of ex07 (``gqa``) and ex08
(``timed_comparison``), whose ``chapters/chNN.py`` declare the items. Never staged into a sandbox.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

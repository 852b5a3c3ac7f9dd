"""Looking at attention (chapters 6, 10, 11 and every claim): the reversal task and its scores,
head pruning, the interactive explorer, attention plots, and the intervals the claims are
asserted with.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

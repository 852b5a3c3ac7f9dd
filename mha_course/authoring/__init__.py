"""Maintainers' tools for the exercises: ``mha-course release`` (solutions/ -> exercises/,
the hints table, the nbgrader source) and keeping a learner's work safe while it runs.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

"""The learner's side of the exercises: progress through them (``mha-course progress``) and
finding a notebook or folder from wherever the learner stands.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

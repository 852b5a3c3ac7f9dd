"""Everything of the course's grading that a sandbox sees, and nothing else: the drivers that
call the learner's code, the proxies of the grader's served model and device, the seeded
generators, the paged model ex16 serves. None of it holds an answer: the class grader stages
this folder whole and replaces the rest of ``mha_course/grading/`` by a stand-in.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

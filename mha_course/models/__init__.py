"""The course's tiny models (chapters 5, 10, 12): a causal LM to decode with, the reversal
Transformer and the positions testbed. The GPT of chapter 13 is ``mha_course.gpt`` and the
production families of chapter 20 ``mha_course.families``.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

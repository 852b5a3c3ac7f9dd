"""Attention modules (chapters 3, 4, 6, 7, 15): one head with learned projections, multi-head
attention with grouped key/value heads (MHA, GQA, MQA; self and cross), the GQA helpers, and
multi-head latent attention. Built from ``mha_course.ops`` and ``mha_course.caches``.
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

"""KV caches, one interface (chapters 5, 7, 14, 15, 16): the :class:`~mha_course.caches.base.Cache`
base and the byte formula (``base``), the dense cache (``dense``), the preallocated one (``static``),
the sliding window and its sinks (``window``, ``sink``), quantized caches and the schemes engines
ship (``quantized``, ``quant_schemes``), an int8 cache read with its products taken from the codes
as stored (``int8_products``) and attention that reads a cache one head at a time (``per_head``).
Chapter 15's latent cache lives with its module (``mha_course.attention.mla``) and chapter 16's
paged cache with its pool (``mha_course.paged``).
"""

from mha_course import _lazy_submodules

__getattr__ = _lazy_submodules(__name__)

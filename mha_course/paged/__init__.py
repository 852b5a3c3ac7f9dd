"""Chapter 16 (2/2): paged attention from scratch (vLLM's PagedAttention, Kwon et al., 2023).

Keys and values of all sequences live in one pool of fixed-size physical blocks of
``block_size`` tokens. Each sequence owns a *block table*: logical block ``i`` (positions
``i·bs ... i·bs + bs - 1``) is physical block ``table[i]``, anywhere in the pool. A sequence
wastes at most one partly filled block, sequences join and leave between decode steps
(continuous batching), and sequences sharing a prompt prefix share its blocks (reference
counts; a shared block is copied before it is written: copy-on-write).

The chapter's code, by concept: the pool (:mod:`mha_course.paged.pool`), the block tables
(:mod:`mha_course.paged.tables`) and attention and decoding through them
(:mod:`mha_course.paged.decode`); every name is importable from here as well.
"""

from __future__ import annotations

from mha_course.paged.decode import continuous_batching, paged_attention, paged_forward
from mha_course.paged.pool import BlockPool, slots_needed
from mha_course.paged.tables import PagedKVCache, PagedSequence

__all__ = [
    "BlockPool",
    "PagedKVCache",
    "PagedSequence",
    "continuous_batching",
    "paged_attention",
    "paged_forward",
    "slots_needed",
]

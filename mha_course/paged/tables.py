"""Chapter 16 (2/2), the tables: per-sequence block tables over one :class:`BlockPool`
(:class:`PagedKVCache`), and one sequence of it seen through the course's cache interface
(:class:`PagedSequence`).

Each sequence owns a *block table*: logical block ``i`` (positions ``i·bs ... i·bs + bs - 1``) is
physical block ``table[i]``, anywhere in the pool. A sequence wastes at most one partly filled
block, sequences join and leave between decode steps (continuous batching), and sequences sharing a
prompt prefix share its blocks (reference counts; a shared block is copied before it is written:
copy-on-write).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from mha_course._checks import check_float, check_positive_int, check_rank, check_tensor, shape_str
from mha_course.caches.base import Cache, check_new_kv, kv_cache_bytes
from mha_course.paged.pool import BlockPool


class PagedKVCache:
    """Per-sequence block tables over one :class:`BlockPool`.

    ``add(seq_id, budget)`` starts a sequence allowed ``budget`` tokens; ``append`` writes its
    new keys/values through its table; ``fork`` starts a sequence sharing another's blocks;
    ``remove`` returns its blocks to the pool. ``sequence(seq_id)`` is one sequence seen through
    the course's cache interface (:class:`PagedSequence`, a :class:`mha_course.caches.base.Cache`).

    Shape:
        per sequence: key, value (G, S_new, D) appended; :meth:`gather` gives (G, S, D).
    """

    def __init__(self, pool: BlockPool) -> None:
        if not isinstance(pool, BlockPool):
            raise ValueError(
                f"pool: expected a BlockPool (the shared blocks, e.g. "
                f"BlockPool(num_blocks, block_size, G, D)), got {type(pool).__name__} "
                f"{pool!r}"
            )
        self.pool = pool
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}
        self.budgets: dict[Hashable, int] = {}

    def _seq(self, seq_id: Hashable) -> list[int]:
        if seq_id not in self.tables:
            raise ValueError(
                f"seq_id: unknown sequence {seq_id!r}; known: {sorted(map(repr, self.tables))}"
            )
        return self.tables[seq_id]

    def add(self, seq_id: Hashable, budget: int) -> None:
        if seq_id in self.tables:
            raise ValueError(f"seq_id: sequence {seq_id!r} already exists")
        budget = check_positive_int(
            "budget", budget, " (tokens the sequence may hold)"
        )  # before any change
        self.tables[seq_id], self.lengths[seq_id], self.budgets[seq_id] = [], 0, budget

    def fork(self, src: Hashable, dst: Hashable, budget: int | None = None) -> None:
        """Start ``dst`` as a copy of ``src`` that shares its blocks (no data copied)."""
        table = self._seq(src)
        self.add(dst, self.budgets[src] if budget is None else budget)
        for b in table:
            self.pool.refcount[b] += 1
        self.tables[dst], self.lengths[dst] = list(table), self.lengths[src]

    def remove(self, seq_id: Hashable) -> None:
        for b in self._seq(seq_id):
            self.pool.release(b)
        del self.tables[seq_id], self.lengths[seq_id], self.budgets[seq_id]

    def append(self, seq_id: Hashable, key: torch.Tensor, value: torch.Tensor) -> None:
        """Write new tokens at positions ``length ... length + S_new - 1`` through the table.

        Shape:
            key, value: (G, S_new, D).
        """
        table = self._seq(seq_id)
        pool, bs = self.pool, self.pool.block_size
        G, D = pool.key.shape[1], pool.key.shape[3]
        for name, t in (("key", key), ("value", value)):
            check_tensor(name, t)
            check_float(name, t)
            check_rank(name, t, "(G, S, D)", rank=3)
            if (t.shape[0], t.shape[2]) != (G, D):
                raise ValueError(
                    f"{name}: expected shape (G, S, D) = ({G}, S, {D}) like the pool's "
                    f"blocks, got {shape_str(t)}"
                )
            if (t.dtype, t.device) != (pool.key.dtype, pool.key.device):
                raise ValueError(
                    f"{name}: expected dtype {pool.key.dtype} on {pool.key.device} (the "
                    f"pool's), got {t.dtype} on {t.device}"
                )
        if value.shape[1] != key.shape[1]:
            raise ValueError(
                f"value: expected shape (G, S, D) with S = {key.shape[1]} (key's length), "
                f"got {shape_str(value)}"
            )
        start, S_new = self.lengths[seq_id], key.shape[1]
        if start + S_new > self.budgets[seq_id]:
            raise ValueError(
                f"key: sequence {seq_id!r} would hold S = {start + S_new} tokens, over its "
                f"budget of {self.budgets[seq_id]}"
            )
        if S_new == 0:
            return
        first, last = start // bs, (start + S_new - 1) // bs  # logical blocks touched
        cow = (
            first < len(table) and pool.refcount[table[first]] > 1
        )  # a shared, partly filled block
        needed = last + 1 - len(table) + cow
        if needed > len(pool.free):  # check before changing anything
            raise RuntimeError(
                f"pool: {needed} more blocks needed but {len(pool.free)} of "
                f"{pool.num_blocks} are free (all blocks are in use); free a "
                f"sequence or make the pool larger"
            )
        if cow:  # copy on write: the other sharers keep the original
            new = pool.allocate()
            pool.key[new], pool.value[new] = pool.key[table[first]], pool.value[table[first]]
            pool.release(table[first])
            table[first] = new
        while len(table) <= last:
            table.append(pool.allocate())
        p = torch.arange(start, start + S_new)  # (S_new,) positions
        blocks = torch.tensor(table, dtype=torch.long)[p // bs].to(
            pool.key.device
        )  # physical block of each
        offsets = (p % bs).to(pool.key.device)  # offset inside it
        pool.key[blocks, :, offsets] = key.transpose(0, 1)  # (G, S_new, D) -> (S_new, G, D)
        pool.value[blocks, :, offsets] = value.transpose(0, 1)
        self.lengths[seq_id] = start + S_new

    def sequence(self, seq_id: Hashable) -> PagedSequence:
        """Sequence ``seq_id`` (already added) as a :class:`mha_course.caches.base.Cache` of batch 1."""
        self._seq(seq_id)
        return PagedSequence(self, seq_id)

    def gather(self, seq_id: Hashable) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, contiguous (what a dense cache would hold).

        Shape:
            Returns key, value (G, S, D).
        """
        table, S = self._seq(seq_id), self.lengths[seq_id]
        idx = torch.tensor(table, dtype=torch.long, device=self.pool.key.device)
        # (G, N, bs, D) -> its n blocks (G, n, bs, D) -> (G, n * bs, D) -> first S positions
        k = self.pool.key_heads.index_select(1, idx).flatten(1, 2)[:, :S]
        v = self.pool.value_heads.index_select(1, idx).flatten(1, 2)[:, :S]
        return k, v

    def block_tables(self, seq_ids: Sequence[Hashable]) -> tuple[torch.Tensor, torch.Tensor]:
        """Block tables padded with block 0 (masked out by the lengths) and the lengths.

        Shape:
            Returns tables (B, M) int64, M = most blocks of any sequence, and lengths (B,).
        """
        tables = [self._seq(s) for s in seq_ids]
        M = max(1, max(len(t) for t in tables))
        padded = torch.zeros(len(tables), M, dtype=torch.long)
        for b, t in enumerate(tables):
            padded[b, : len(t)] = torch.tensor(t, dtype=torch.long)
        return padded, torch.tensor([self.lengths[s] for s in seq_ids])


class PagedSequence(Cache):
    """One sequence of a :class:`PagedKVCache` through the course's cache interface, so it can be
    passed as ``MultiHeadAttention(...)(x, kv_cache=cache.sequence(seq_id))``: ``update`` appends
    through the block table and returns the sequence's keys/values gathered (batch B = 1).
    ``nbytes`` counts its ``length`` tokens, ``allocated_bytes`` its whole blocks (shared blocks
    count for every sharer); ``reset`` returns its blocks to the pool and keeps its budget.

    Shape:
        update: key (1, G, S_new, D), value (1, G, S_new, D) -> (1, G, S, D) each.
    """

    def __init__(self, cache: PagedKVCache, seq_id: Hashable) -> None:
        self.cache, self.seq_id = cache, seq_id

    @property
    def length(self) -> int:
        """Tokens written to this sequence."""
        self.cache._seq(self.seq_id)
        return self.cache.lengths[self.seq_id]

    def held(self) -> tuple[torch.Tensor, ...]:
        """Its keys and values, gathered: (G, S, D) each."""
        return self.cache.gather(self.seq_id) if self.length else ()

    def allocated(self) -> tuple[torch.Tensor, ...]:
        """Its blocks: (n, G, bs, D) for keys and for values."""
        idx = torch.tensor(self.cache._seq(self.seq_id), dtype=torch.long)
        return (self.cache.pool.key[idx], self.cache.pool.value[idx]) if len(idx) else ()

    @property
    def nbytes(self) -> int:
        """Bytes of its ``length`` tokens: :func:`mha_course.kv_cache_bytes` (no gather)."""
        pool = self.cache.pool
        if not self.length:
            return 0
        return kv_cache_bytes(
            1, pool.key.shape[1], pool.key.shape[3], self.length, 1, pool.key.dtype
        )

    def reset(self) -> None:
        """Return its blocks to the pool; the sequence stays, empty, with its budget."""
        table = self.cache._seq(self.seq_id)
        for b in table:
            self.cache.pool.release(b)
        table.clear()
        self.cache.lengths[self.seq_id] = 0

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append through the table (checks first: a rejected call changes nothing); return all.

        Shape:
            key, value: (1, G, S_new, D). Returns key, value (1, G, S, D).
        """
        check_new_kv(key, value, None)
        if key.shape[0] != 1:
            raise ValueError(
                f"key: expected shape (B, G, S, D) with B = 1 (one paged sequence), "
                f"got {shape_str(key)}"
            )
        self.cache.append(self.seq_id, key[0], value[0])  # (1, G, S_new, D) -> (G, S_new, D)
        k, v = self.cache.gather(self.seq_id)  # (G, S, D)
        return k[None], v[None]  # (G, S, D) -> (1, G, S, D)

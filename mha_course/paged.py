"""Chapter 16 (2/2): paged attention from scratch (vLLM's PagedAttention, Kwon et al., 2023).

Keys and values of all sequences live in one pool of fixed-size physical blocks of
``block_size`` tokens. Each sequence owns a *block table*: logical block ``i`` (positions
``i·bs ... i·bs + bs - 1``) is physical block ``table[i]``, anywhere in the pool. A sequence
wastes at most one partly filled block, sequences join and leave between decode steps
(continuous batching), and sequences sharing a prompt prefix share its blocks (reference
counts; a shared block is copied before it is written: copy-on-write).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch

from ._checks import check_float, check_positive_int, check_rank, check_tensor, shape_str
from .cache import Cache, check_new_kv, kv_cache_bytes
from .cache_attention import attention_by_head
from .mha import MultiHeadAttention, merge_heads, split_heads
from .rope import apply_rope


class BlockPool:
    """``num_tokens / block_size`` physical blocks of keys and values, with reference counts.

    Shape:
        key: (N, G, bs, D), value: (N, G, bs, D); N = num_tokens / block_size blocks.
    """

    def __init__(self, num_tokens: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        check_positive_int("num_tokens", num_tokens)
        check_positive_int("block_size", block_size)
        if num_tokens % block_size:
            raise ValueError(f"block_size: expected a divisor of num_tokens = {num_tokens} (the pool "
                             f"is (N, G, bs, D) with N = num_tokens / bs), got {block_size}")
        G, D = check_positive_int("num_kv_heads", num_kv_heads), check_positive_int("head_dim", head_dim)
        N = num_tokens // block_size
        self.block_size, self.num_blocks = block_size, N
        self.key = torch.zeros(N, G, block_size, D, dtype=dtype, device=device)
        self.value = torch.zeros_like(self.key)
        self.refcount = [0] * N
        self.free = list(range(N - 1, -1, -1))  # a stack: pop() hands out block 0 first

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (allocated up front)."""
        return 2 * self.key.numel() * self.key.element_size()

    @property
    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free)

    def allocate(self) -> int:
        if not self.free:
            raise RuntimeError(f"pool: all {self.num_blocks} blocks are in use; free a sequence "
                               f"or make the pool larger")
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def release(self, block: int) -> None:
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free.append(block)


class PagedKVCache:
    """Per-sequence block tables over one :class:`BlockPool`.

    ``add(seq_id, budget)`` starts a sequence allowed ``budget`` tokens; ``append`` writes its
    new keys/values through its table; ``fork`` starts a sequence sharing another's blocks;
    ``remove`` returns its blocks to the pool. ``sequence(seq_id)`` is one sequence seen through
    the course's cache interface (:class:`PagedSequence`, a :class:`mha_course.cache.Cache`).

    Shape:
        per sequence: key, value (G, S_new, D) appended; :meth:`gather` gives (G, S, D).
    """

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}
        self.budgets: dict[Hashable, int] = {}

    def _seq(self, seq_id: Hashable) -> list[int]:
        if seq_id not in self.tables:
            raise ValueError(f"seq_id: unknown sequence {seq_id!r}; known: {sorted(map(repr, self.tables))}")
        return self.tables[seq_id]

    def add(self, seq_id: Hashable, budget: int) -> None:
        if seq_id in self.tables:
            raise ValueError(f"seq_id: sequence {seq_id!r} already exists")
        budget = check_positive_int("budget", budget, " (tokens the sequence may hold)")  # before any change
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
                raise ValueError(f"{name}: expected shape (G, S, D) = ({G}, S, {D}) like the pool's "
                                 f"blocks, got {shape_str(t)}")
            if (t.dtype, t.device) != (pool.key.dtype, pool.key.device):
                raise ValueError(f"{name}: expected dtype {pool.key.dtype} on {pool.key.device} (the "
                                 f"pool's), got {t.dtype} on {t.device}")
        if value.shape[1] != key.shape[1]:
            raise ValueError(f"value: expected shape (G, S, D) with S = {key.shape[1]} (key's length), "
                             f"got {shape_str(value)}")
        start, S_new = self.lengths[seq_id], key.shape[1]
        if start + S_new > self.budgets[seq_id]:
            raise ValueError(f"key: sequence {seq_id!r} would hold S = {start + S_new} tokens, over its "
                             f"budget of {self.budgets[seq_id]}")
        if S_new == 0:
            return
        first, last = start // bs, (start + S_new - 1) // bs  # logical blocks touched
        cow = first < len(table) and pool.refcount[table[first]] > 1  # a shared, partly filled block
        needed = last + 1 - len(table) + cow
        if needed > len(pool.free):  # check before changing anything
            raise RuntimeError(f"pool: {needed} more blocks needed but {len(pool.free)} of "
                               f"{pool.num_blocks} are free (all blocks are in use); free a "
                               f"sequence or make the pool larger")
        if cow:  # copy on write: the other sharers keep the original
            new = pool.allocate()
            pool.key[new], pool.value[new] = pool.key[table[first]], pool.value[table[first]]
            pool.release(table[first])
            table[first] = new
        while len(table) <= last:
            table.append(pool.allocate())
        p = torch.arange(start, start + S_new)  # (S_new,) positions
        blocks = torch.tensor(table, dtype=torch.long)[p // bs].to(pool.key.device)  # physical block of each
        offsets = (p % bs).to(pool.key.device)  # offset inside it
        pool.key[blocks, :, offsets] = key.transpose(0, 1)  # (G, S_new, D) -> (S_new, G, D)
        pool.value[blocks, :, offsets] = value.transpose(0, 1)
        self.lengths[seq_id] = start + S_new

    def sequence(self, seq_id: Hashable) -> PagedSequence:
        """Sequence ``seq_id`` (already added) as a :class:`mha_course.cache.Cache` of batch 1."""
        self._seq(seq_id)
        return PagedSequence(self, seq_id)

    def gather(self, seq_id: Hashable) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, contiguous (what a dense cache would hold).

        Shape:
            Returns key, value (G, S, D).
        """
        table, S = self._seq(seq_id), self.lengths[seq_id]
        idx = torch.tensor(table, dtype=torch.long)
        # (n, G, bs, D) -> (G, n, bs, D) -> (G, n * bs, D) -> first S positions
        k = self.pool.key[idx].transpose(0, 1).flatten(1, 2)[:, :S]
        v = self.pool.value[idx].transpose(0, 1).flatten(1, 2)[:, :S]
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
        return kv_cache_bytes(1, pool.key.shape[1], pool.key.shape[3], self.length, 1, pool.key.dtype)

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
            raise ValueError(f"key: expected shape (B, G, S, D) with B = 1 (one paged sequence), "
                             f"got {shape_str(key)}")
        self.cache.append(self.seq_id, key[0], value[0])  # (1, G, S_new, D) -> (G, S_new, D)
        k, v = self.cache.gather(self.seq_id)  # (G, S, D)
        return k[None], v[None]  # (G, S, D) -> (1, G, S, D)


def paged_attention(query: torch.Tensor, cache: PagedKVCache, seq_ids: Sequence[Hashable],
                    scale: float | None = None) -> torch.Tensor:
    """Causal attention of each sequence's last L tokens (already appended) to its keys,
    read from the pool through the block tables — one call for sequences of different lengths.

    Each sequence and key/value head is gathered on its own by one index over its table
    (``pool.key[:, g].index_select(0, table)``: its M blocks, (M, bs, D) -> its S positions (S, D)), a few MiB used
    while they are in the CPU's cache — not the whole batch padded to the longest table, which is
    what made this an order of magnitude slower than a dense cache (``benchmarks/kv_cache_decode.py``).

    Shape:
        query: (B, H, L, D), B = len(seq_ids). Returns (B, H, L, D).
    """
    check_tensor("query", query)
    check_rank("query", query, "(B, H, L, D)", rank=4)
    pool = cache.pool
    G, D = pool.key.shape[1], pool.key.shape[3]
    if query.shape[0] != len(seq_ids) or query.shape[1] % G or query.shape[3] != D:
        raise ValueError(f"query: expected shape (B, H, L, D) with B = len(seq_ids) = {len(seq_ids)}, "
                         f"H a multiple of G = {G} and D = {D}, got {shape_str(query)}")
    L = query.shape[2]
    tables = [torch.tensor(cache._seq(s), dtype=torch.long, device=pool.key.device) for s in seq_ids]
    lengths = [cache.lengths[s] for s in seq_ids]
    if any(n < L for n in lengths):
        raise ValueError(f"query: expected each sequence to hold at least L = {L} tokens (append this "
                         f"step's keys first), got lengths {lengths}")

    # Two buffers reused by every (sequence, head): each load overwrites them after the last one is used.
    most, N, bs = max(len(t) for t in tables), pool.num_blocks, pool.block_size
    k_buf = pool.key.new_empty(most, bs * D)
    v_buf = torch.empty_like(k_buf)
    k_rows, v_rows = pool.key.view(N, G, bs * D), pool.value.view(N, G, bs * D)  # a block's head: one row
    grad = torch.is_grad_enabled() and (pool.key.requires_grad or pool.value.requires_grad)

    def load(b: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        # (N, G, bs * D) -> head g (N, bs * D) -> its M blocks (M, bs * D) -> (M * bs, D) -> its S positions
        M = len(tables[b])
        k, v = (torch.index_select(rows[:, g], 0, tables[b], **({} if grad else {"out": buf[:M]}))
                for rows, buf in ((k_rows, k_buf), (v_rows, v_buf)))  # autograd allows no out=
        return k.view(-1, D)[: lengths[b]], v.view(-1, D)[: lengths[b]]

    return attention_by_head(query, load, num_kv_heads=G, scale=scale)


def paged_forward(module: MultiHeadAttention, x: torch.Tensor, cache: PagedKVCache,
                  seq_ids: Sequence[Hashable]) -> torch.Tensor:
    """One step of ``module`` (causal self-attention) for a batch of sequences held in a paged
    cache: project, rotate (if ``module.rope``) at each sequence's own positions, append the new
    keys/values through the tables, attend, project out.

    Shape:
        x: (B, L, E), B = len(seq_ids). Returns (B, L, E).
    """
    H, G = module.num_heads, module.num_kv_heads
    q = split_heads(module.q_proj(x), H)  # (B, L, E) -> (B, H, L, D)
    k = split_heads(module.k_proj(x), G)  # (B, L, E) -> (B, G, L, D)
    v = split_heads(module.v_proj(x), G)  # (B, L, E) -> (B, G, L, D)
    L = x.shape[1]
    for s in seq_ids:
        cache._seq(s)
    if module.rope is not None:
        start = torch.tensor([cache.lengths[s] for s in seq_ids])[:, None]  # (B, 1)
        pos = (start + torch.arange(L)[None, :]).to(x.device)  # (B, L) per-sequence positions
        q = apply_rope(q, pos, layout=module.rope, base=module.rope_base)
        k = apply_rope(k, pos, layout=module.rope, base=module.rope_base)
    for b, s in enumerate(seq_ids):
        cache.append(s, k[b], v[b])
    out = paged_attention(q, cache, seq_ids)  # (B, H, L, D)
    return module.out_proj(merge_heads(out))  # (B, H, L, D) -> (B, L, H*D) -> (B, L, E)


def continuous_batching(module: MultiHeadAttention, requests: Mapping[Hashable, tuple[int, torch.Tensor]],
                        cache: PagedKVCache) -> tuple[dict[Hashable, torch.Tensor], list[list[Hashable]]]:
    """Decode requests that join and leave: request ``r = (join_step, x)`` enters the batch at
    step ``join_step``, feeds its T tokens one per step, and leaves (its blocks freed for
    the next ones) after the last. Every step runs ONE batched :func:`paged_forward`.

    Shape:
        x: (T, E) per request. Returns outputs {id: (T, E)} and the batch of each step.
    """
    outputs: dict[Hashable, list[torch.Tensor]] = {r: [] for r in requests}
    trace: list[list[Hashable]] = []
    active: list[Hashable] = []
    step = 0
    while len(trace) == 0 or active or any(j >= step for j, _ in requests.values()):
        for r, (join, x) in requests.items():
            if join == step:
                cache.add(r, x.shape[0])
                active.append(r)
        if active:
            x = torch.stack([requests[r][1][len(outputs[r])] for r in active])[:, None]  # (B, 1, E)
            y = paged_forward(module, x, cache, active)  # (B, 1, E)
            for b, r in enumerate(active):
                outputs[r].append(y[b, 0])
        trace.append(list(active))
        for r in [r for r in active if len(outputs[r]) == requests[r][1].shape[0]]:
            cache.remove(r)
            active.remove(r)
        step += 1
    return {r: torch.stack(o) for r, o in outputs.items()}, trace


def slots_needed(lengths: Sequence[int], block_size: int | None = None, max_len: int | None = None) -> int:
    """Token slots a cache reserves for sequences of these lengths: paged, ``ceil(l / bs) · bs``
    each; preallocated (``block_size=None``), ``max_len`` each. Times
    :func:`mha_course.kv_cache_bytes` per token to get bytes.
    """
    if block_size is None:
        return len(lengths) * check_positive_int("max_len", max_len)
    bs = check_positive_int("block_size", block_size)
    return sum(-(-n // bs) * bs for n in lengths)

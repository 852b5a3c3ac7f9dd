"""Chapter 16 (2/2), the decode: attention read through the block tables
(:func:`paged_attention`), one step of a :class:`mha_course.MultiHeadAttention` over a paged batch
(:func:`paged_forward`), and requests that join and leave between steps
(:func:`continuous_batching`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch

from ._checks import check_rank, check_tensor, shape_str
from .cache_attention import attention_by_head
from .mha import MultiHeadAttention, merge_heads, split_heads
from .paged_cache import PagedKVCache
from .rope import apply_rope


def first_of_run(table: Sequence[int]) -> int | None:
    """``table[0]`` if the blocks are one run ``table[0], table[0] + 1, ...`` (handed out in order,
    as :class:`mha_course.BlockPool` does for a sequence filled while no other one grows); else None."""
    if not table:
        return None
    first = table[0]
    return first if list(table) == list(range(first, first + len(table))) else None


def paged_attention(query: torch.Tensor, cache: PagedKVCache, seq_ids: Sequence[Hashable],
                    scale: float | None = None) -> torch.Tensor:
    """Causal attention of each sequence's last L tokens (already appended) to its keys,
    read from the pool through the block tables — one call for sequences of different lengths.

    Each sequence and key/value head is read on its own (:func:`mha_course.cache_attention.
    attention_by_head`), from the pool's head-major layout ``key_heads`` (G, N, bs, D):
    - its blocks one run ``t, t + 1, ..., t + M - 1``: ``key_heads[g, t:t + M]`` (M, bs, D) IS its
      (S, D) keys, a view — nothing copied, the same bytes read as from a dense cache;
    - otherwise (blocks interleaved with other sequences', as decoding a batch makes them): one
      ``index_select`` of its M blocks into a buffer reused by every (sequence, head), a few MiB
      used while they are in the CPU's cache.
    ``benchmarks/kv_cache_decode.py`` times both against the dense cache.

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
    tables = [cache._seq(s) for s in seq_ids]
    lengths = [cache.lengths[s] for s in seq_ids]
    if any(n < L for n in lengths):
        raise ValueError(f"query: expected each sequence to hold at least L = {L} tokens (append this "
                         f"step's keys first), got lengths {lengths}")
    firsts = [first_of_run(t) for t in tables]
    index = [None if f is not None else torch.tensor(t, dtype=torch.long, device=pool.key.device)
             for f, t in zip(firsts, tables)]

    N, bs = pool.num_blocks, pool.block_size
    k_heads, v_heads = pool.key_heads, pool.value_heads  # (G, N, bs, D)
    # (G, N, bs, D) -> (G, N, bs * D): a block of one head is one row, for index_select
    k_rows, v_rows = k_heads.view(G, N, bs * D), v_heads.view(G, N, bs * D)
    most = max((len(t) for t, i in zip(tables, index) if i is not None), default=0)
    k_buf = k_heads.new_empty(most, bs * D)  # reused by every gathered (sequence, head)
    v_buf = torch.empty_like(k_buf)
    grad = torch.is_grad_enabled() and (k_heads.requires_grad or v_heads.requires_grad)

    def load(b: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        M, S, first = len(tables[b]), lengths[b], firsts[b]
        if first is not None:  # head g's blocks t..t+M-1: (M, bs, D) -> (M * bs, D), a view
            return (k_heads[g, first:first + M].view(-1, D)[:S],
                    v_heads[g, first:first + M].view(-1, D)[:S])
        # head g (N, bs * D) -> its M blocks (M, bs * D) -> (M * bs, D) -> its S positions
        k, v = (torch.index_select(rows[g], 0, index[b], **({} if grad else {"out": buf[:M]}))
                for rows, buf in ((k_rows, k_buf), (v_rows, v_buf)))  # autograd allows no out=
        return k.view(-1, D)[:S], v.view(-1, D)[:S]

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
    for r, (join, _) in requests.items():  # before any change to the cache
        if isinstance(join, bool) or not isinstance(join, int) or join < 0:
            raise ValueError(f"requests: expected request {r!r} = (join_step, x) with join_step an "
                             f"int >= 0 (the first step is 0), got join_step {join!r}")
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

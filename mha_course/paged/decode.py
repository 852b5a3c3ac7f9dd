"""Chapter 16 (2/2), the decode: attention read through the block tables
(:func:`paged_attention`), one step of a :class:`mha_course.MultiHeadAttention` over a paged batch
(:func:`paged_forward`), and requests that join and leave between steps
(:func:`continuous_batching`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch
import torch.nn.functional as F

from mha_course._checks import check_rank, check_tensor, shape_str
from mha_course.attention.heads import merge_heads, split_heads
from mha_course.attention.mha import MultiHeadAttention
from mha_course.caches.per_head import attention_by_head, pairs_per_slice
from mha_course.ops.rope import apply_rope
from mha_course.paged.tables import PagedKVCache


def first_of_run(table: Sequence[int]) -> int | None:
    """``table[0]`` if the blocks are one run ``table[0], table[0] + 1, ...`` (handed out in order,
    as :class:`mha_course.BlockPool` does for a sequence filled while no other one grows); else None."""
    if not table:
        return None
    first = table[0]
    return first if list(table) == list(range(first, first + len(table))) else None


PATHS = ("views", "masked span", "gather")
SPAN_SLACK = 2  # the masked span reads at most this many times the batch's own blocks
SPAN_MAX_SEQUENCES = 8  # ... and computes B times the dot products: a small batch only
SPAN_MAX_SEQUENCES_CPU = 3  # on a CPU, where gathering is faster from B = 4 (read_path)


def read_path(tables: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> str:
    """How :func:`paged_attention` reads a batch whose block tables are ``tables`` on ``device``:

    - ``"views"``: every sequence's blocks are one run ``t, t + 1, ...``: a (sequence, head)
      read alone is a view of the pool, nothing copied;
    - ``"masked span"``: blocks interleaved (as decoding a batch grows them), the batch small
      (B <= SPAN_MAX_SEQUENCES, on a CPU B <= SPAN_MAX_SEQUENCES_CPU) and its blocks filling
      most of the span of the pool they lie in (span <= SPAN_SLACK x the blocks they hold):
      :func:`_span_attention`, one attention call;
    - ``"gather"``: otherwise, a slice of (sequence, head) pairs at a time: their blocks gathered
      by one index into buffers the pool keeps.

    The CPU limit is measured (``benchmarks/README.md``; one thread of an AMD Zen 5, H = 16,
    D = 64, each read from a cold cache): the span computes B times the dot products and
    gathering copies the keys and values once, so the span wins for B = 2 (1.27-1.39x dense
    against 1.51-1.91x), neither for B = 3, and gathering from B = 4 (at S = 8192: 1.35x
    against 1.48x) except at S = 2048, where B = 4 tied.
    """
    if not isinstance(tables, (list, tuple)) or not all(
        isinstance(t, (list, tuple)) and all(isinstance(n, int) for n in t) for t in tables
    ):
        raise ValueError(
            f"tables: expected a list of block tables (lists of block numbers), got {tables!r:.80}"
        )
    try:
        on_cpu = torch.device(device).type == "cpu"
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device: expected a torch.device or a name such as 'cpu' or 'cuda', got {device!r}"
        ) from None
    if all(first_of_run(t) is not None for t in tables):
        return "views"
    limit = SPAN_MAX_SEQUENCES_CPU if on_cpu else SPAN_MAX_SEQUENCES
    if len(tables) > limit or not all(tables):
        return "gather"
    span = max(max(t) for t in tables) - min(min(t) for t in tables) + 1
    return "masked span" if span <= SPAN_SLACK * sum(len(t) for t in tables) else "gather"


def _span_attention(
    query: torch.Tensor,
    key_heads: torch.Tensor,
    value_heads: torch.Tensor,
    tables: Sequence[Sequence[int]],
    lengths: Sequence[int],
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's last L tokens, all B sequences in ONE SDPA call: the
    batch's queries attend to every token of the span of blocks ``lo .. hi - 1`` their tables lie
    in (a view of the pool: about the bytes a dense cache of the batch holds), and a mask keeps
    query ``l`` of sequence ``b`` to b's own tokens at positions ``<= S_b - L + l``. FlexAttention's
    paged attention reads a pool through a block mask the same way; SDPA does not skip the masked
    tiles, so this computes B times the dot products of a per-sequence read: cheap beside the
    bytes for a small batch, not for a large one (hence :func:`read_path`'s limits).

    Shape:
        query: (B, H, L, D); key_heads, value_heads: (G, N, bs, D); tables[b]: ceil(S_b / bs)
        blocks. Returns (B, H, L, D).
    """
    B, H, L, D = query.shape
    G, bs = key_heads.shape[0], key_heads.shape[2]
    dev = query.device
    lo, hi = min(min(t) for t in tables), max(max(t) for t in tables) + 1
    span = (hi - lo) * bs  # tokens in the span
    # pos[b, j]: the position span token j holds in sequence b; span (after every query) if not b's
    pos = torch.full((B, span), span, dtype=torch.long, device=dev)
    for b, (table, S) in enumerate(zip(tables, lengths)):
        first_row = (
            torch.tensor(table, device=dev)[:, None] - lo
        ) * bs  # (M, 1) each block's place
        pos[b, (first_row + torch.arange(bs, device=dev)).reshape(-1)[:S]] = torch.arange(
            S, device=dev
        )
    last = torch.tensor(lengths, device=dev)[:, None] - L + torch.arange(L, device=dev)  # (B, L)
    mask = pos[:, None, :] <= last[:, :, None]  # (B, 1, span) <= (B, L, 1) -> (B, L, span)
    k = key_heads[:, lo:hi].reshape(1, G, span, D)  # (G, hi - lo, bs, D) -> (1, G, span, D), a view
    v = value_heads[:, lo:hi].reshape(1, G, span, D)
    q = query.transpose(0, 1).reshape(
        1, H, B * L, D
    )  # (B, H, L, D) -> (H, B, L, D) -> (1, H, BL, D)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.reshape(B * L, span), scale=scale, enable_gqa=H != G
    )  # (1, H, BL, D)
    return out.reshape(H, B, L, D).transpose(0, 1)  # (1, H, BL, D) -> (H, B, L, D) -> (B, H, L, D)


def paged_attention(
    query: torch.Tensor,
    cache: PagedKVCache,
    seq_ids: Sequence[Hashable],
    scale: float | None = None,
    path: str | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's last L tokens (already appended) to its keys,
    read from the pool through the block tables — one call for sequences of different lengths.

    The pool is laid out head-major, ``key_heads`` (G, N, bs, D); :func:`read_path` picks how:
    - ``views``: a sequence's blocks one run ``t, ..., t + M - 1``: ``key_heads[g, t:t + M]``
      (M, bs, D) IS its (S, D) keys, a view: where a slice is one (sequence, key/value head)
      pair (on a CPU, a pair of at least ``SLICE_BYTES``) it is read as that view
      (:func:`mha_course.caches.per_head.attention_by_head`), the same bytes as a dense cache;
      otherwise as ``gather`` (on a GPU one launch beats B·G small ones);
    - ``masked span``: blocks interleaved (decoding a batch grows it a block per sequence in
      turn), a small batch: :func:`_span_attention`, one attention over the span of the pool;
    - ``gather``: otherwise, a slice of (sequence, head) pairs at a time (on a GPU all of them),
      the keys and values of all their blocks by ONE ``index_select`` each into a buffer reused
      by every slice, then one batched attention over the slice, the padding of shorter
      sequences masked.
    ``path`` forces one (None: :func:`read_path`'s choice).
    ``benchmarks/kv_cache_decode.py`` times the views and an interleaved batch of 4 (on a CPU
    gathered, elsewhere the masked span) against the dense cache,
    ``benchmarks/paged_read.py`` the ways of reading interleaved blocks that were tried.

    Shape:
        query: (B, H, L, D), B = len(seq_ids). Returns (B, H, L, D).
    """
    check_tensor("query", query)
    check_rank("query", query, "(B, H, L, D)", rank=4)
    pool = cache.pool
    G, D = pool.key.shape[1], pool.key.shape[3]
    if query.shape[0] != len(seq_ids) or query.shape[1] % G or query.shape[3] != D:
        raise ValueError(
            f"query: expected shape (B, H, L, D) with B = len(seq_ids) = {len(seq_ids)}, "
            f"H a multiple of G = {G} and D = {D}, got {shape_str(query)}"
        )
    L = query.shape[2]
    tables = [cache._seq(s) for s in seq_ids]
    lengths = [cache.lengths[s] for s in seq_ids]
    if any(n < L for n in lengths):
        raise ValueError(
            f"query: expected each sequence to hold at least L = {L} tokens (append this "
            f"step's keys first), got lengths {lengths}"
        )
    if path not in (None, *PATHS):
        raise ValueError(
            f"path: expected None (read_path's choice) or one of {PATHS}, got {path!r}"
        )
    path = read_path(tables, query.device) if path is None else path
    if path == "masked span" and not all(tables):
        raise ValueError(
            "path: 'masked span' needs every sequence to hold a block; got an empty table"
        )
    if path == "masked span":
        return _span_attention(
            query, pool.key_heads, pool.value_heads, tables, lengths, scale=scale
        )
    dev, (N, bs) = pool.key.device, (pool.num_blocks, pool.block_size)
    M = max(1, max(len(t) for t in tables))  # blocks of the longest table
    # each sequence's blocks, padded to M with block 0 (tokens past S_b are masked by attention)
    blocks = torch.tensor([list(t) + [0] * (M - len(t)) for t in tables], device=dev)  # (B, M)
    # pair p = (sequence b, head g) reads rows g·N + blocks[b] of the pool seen as (G·N, bs·D)
    heads = torch.arange(G, device=dev)[None, :, None] * N  # (1, G, 1): head g's first row
    rows = (heads + blocks[:, None, :]).reshape(-1, M)  # (1, G, 1) + (B, 1, M) -> (B·G, M)
    k_rows, v_rows = (
        t.reshape(G * N, bs * D) for t in (pool.key_heads, pool.value_heads)
    )  # (G, N, bs, D) -> (G·N, bs·D): one block of one head a row, a view

    step = pairs_per_slice(len(rows), M * bs * 2 * D * pool.key.element_size(), dev)
    firsts = [first_of_run(t) for t in tables]  # a pair read alone whose blocks are a run: a view
    k_heads, v_heads = pool.key_heads, pool.value_heads  # (G, N, bs, D)
    # autograd keeps what the products read (and allows no out=): fresh tensors for each slice
    grad = torch.is_grad_enabled() and (k_rows.requires_grad or query.requires_grad)
    # otherwise one buffer per slice, reused by every slice and (on a CPU) by the next call:
    # fresh memory would be page-faulted in each time
    bufs = (None, None) if grad else pool.gather_buffers(step * M)

    def load(i: int, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys, values of pairs i..j-1: every block they hold gathered by ONE index.

        Shape: returns (j - i, M·bs, D) twice."""
        b, first = i // G, firsts[i // G]
        if j - i == 1 and first is not None:  # one pair, its blocks one run: a view, no copy
            g, M_b = i % G, len(tables[b])
            return tuple(
                t[g, first : first + M_b].view(1, M_b * bs, D) for t in (k_heads, v_heads)
            )  # (M_b, bs, D) -> (1, M_b·bs, D)
        index = rows[i:j].reshape(-1)  # (n, M) -> (n·M,)
        return tuple(
            torch.index_select(t, 0, index, **({} if grad else {"out": buf[: len(index)]})).view(
                j - i, M * bs, D
            )
            for t, buf in zip((k_rows, v_rows), bufs)
        )  # (n·M, bs·D) -> (n, M·bs, D)

    return attention_by_head(
        query, load, num_kv_heads=G, lengths=lengths, scale=scale, slice_pairs=step
    )


def paged_forward(
    module: MultiHeadAttention, x: torch.Tensor, cache: PagedKVCache, seq_ids: Sequence[Hashable]
) -> torch.Tensor:
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


def continuous_batching(
    module: MultiHeadAttention,
    requests: Mapping[Hashable, tuple[int, torch.Tensor]],
    cache: PagedKVCache,
) -> tuple[dict[Hashable, torch.Tensor], list[list[Hashable]]]:
    """Decode requests that join and leave: request ``r = (join_step, x)`` enters the batch at
    step ``join_step``, feeds its T tokens one per step, and leaves (its blocks freed for
    the next ones) after the last. Every step runs ONE batched :func:`paged_forward`.

    Shape:
        x: (T, E) per request. Returns outputs {id: (T, E)} and the batch of each step.
    """
    for r, (join, _) in requests.items():  # before any change to the cache
        if isinstance(join, bool) or not isinstance(join, int) or join < 0:
            raise ValueError(
                f"requests: expected request {r!r} = (join_step, x) with join_step an "
                f"int >= 0 (the first step is 0), got join_step {join!r}"
            )
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

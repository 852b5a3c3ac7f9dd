"""Chapter 19: ring attention — one sequence split over P processes with ``torch.distributed``.

Each rank keeps its own block of queries. The key/value blocks travel around the ring: at every
step a rank sends the block it holds to rank + 1 and receives one from rank - 1 (one
``batch_isend_irecv`` of paired sends and receives, started *before* the step's compute so the
transfer overlaps it; NCCL needs the pairing, unpaired ``isend``/``irecv`` can deadlock), and folds the
block it holds into its running maximum, sum and output with chapter 9's
:func:`~mha_course.kernels.tiled.online_softmax_update`. After P steps every rank has seen every key and
holds the exact attention output for its queries; a rank holds two key/value blocks (the current
one and the one arriving) and works on one tile of scores, at most (T/P, T/P), at a time.

Causal attention with contiguous blocks is unbalanced: rank 0's queries see only block 0, the
last rank's see all P. The *zig-zag* layout cuts the sequence into 2P chunks and gives rank r
chunks r and 2P-1-r, so every rank does the same work (:func:`work_per_rank` counts it).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from mha_course._checks import check_positive_int, check_qkv, check_rank, shape_str
from mha_course.kernels.tiled import online_softmax_update

LAYOUTS = ("contiguous", "zigzag")


def chunk_ids(rank: int, world_size: int, layout: str = "contiguous") -> list[int]:
    """Which chunks of the sequence a rank holds: ``[rank]`` of P chunks (contiguous), or
    ``[rank, 2P-1-rank]`` of 2P chunks (zig-zag)."""
    _check_layout(layout)
    check_positive_int("world_size", world_size, "P (ranks)")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank: expected an int in [0, P) = [0, {world_size}), got {rank!r}")
    return [rank] if layout == "contiguous" else [rank, 2 * world_size - 1 - rank]


def _check_layout(layout: object) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    return layout  # type: ignore[return-value]


def _chunk_len(T: int, world_size: int, layout: str) -> int:
    _check_layout(layout)
    check_positive_int("world_size", world_size, "P (ranks)")
    n = world_size if layout == "contiguous" else 2 * world_size
    if T % n:
        raise ValueError(
            f"T: the sequence length must be a multiple of {n} for {world_size} "
            f"ranks with the {layout} layout, got T = {T}"
        )
    return T // n


def shard(x: torch.Tensor, rank: int, world_size: int, layout: str = "contiguous") -> torch.Tensor:
    """The part of a full sequence that ``rank`` holds.

    Shape:
        x: (..., T, D). Returns (..., T / P, D).
    """
    check_rank("x", x, "(..., T, D)", min_rank=2)
    ids = chunk_ids(rank, world_size, layout)
    c = _chunk_len(x.shape[-2], world_size, layout)
    return torch.cat([x[..., i * c : (i + 1) * c, :] for i in ids], dim=-2)


def unshard(parts: list[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """Put the ranks' parts back in sequence order (inverse of :func:`shard`).

    Shape:
        parts: P tensors (..., T / P, D). Returns (..., T, D).
    """
    _check_layout(layout)
    P = len(parts)
    if P == 0:
        raise ValueError("parts: expected one tensor (..., T / P, D) per rank, got none")
    for r, part in enumerate(parts):
        check_rank(f"parts[{r}]", part, "(..., T / P, D)", min_rank=2)
        if part.shape != parts[0].shape:
            raise ValueError(
                f"parts[{r}]: expected the shape of parts[0] {shape_str(parts[0])} "
                f"(every rank holds T / P positions), got {shape_str(part)}"
            )
    if layout == "zigzag" and parts[0].shape[-2] % 2:
        raise ValueError(
            f"parts: the zigzag layout holds two chunks per rank, so T / P must be "
            f"even, got parts[0] {shape_str(parts[0])}"
        )
    if layout == "contiguous":
        return torch.cat(parts, dim=-2)
    chunks: list[torch.Tensor | None] = [None] * (2 * P)
    for r, part in enumerate(parts):
        first, second = part.chunk(2, dim=-2)  # (..., T/P, D) -> 2 x (..., T/2P, D)
        chunks[r], chunks[2 * P - 1 - r] = first, second
    return torch.cat(chunks, dim=-2)


def _tiles(rank: int, world_size: int, layout: str, c: int) -> list[tuple[int, int]]:
    """(first position, chunk index within the rank's block) of each chunk a rank holds."""
    return [(i * c, n) for n, i in enumerate(chunk_ids(rank, world_size, layout))]


def _step_pairs(q_rank, kv_rank, world_size, layout, c, is_causal):
    """The (query chunk, key chunk) tiles computed at one ring step; causal skips tiles wholly
    in the future and marks the ones that cross the diagonal."""
    pairs = []
    for q0, qn in _tiles(q_rank, world_size, layout, c):
        for k0, kn in _tiles(kv_rank, world_size, layout, c):
            if is_causal and k0 > q0 + c - 1:
                continue  # every key is after every query: nothing to compute
            pairs.append((q0, qn, k0, kn, is_causal and k0 + c - 1 > q0))
    return pairs


def work_per_rank(
    world_size: int, layout: str = "contiguous", is_causal: bool = True, T: int | None = None
) -> list[list[int]]:
    """Score entries each rank computes at each ring step: ``work[step][rank]``.

    The step takes as long as its busiest rank, so ``sum(max(work[s]) for s)`` is the critical
    path. Default ``T = 2P`` (one position per zig-zag chunk): the counts are then in chunk units.
    """
    T = 2 * world_size if T is None else T
    c = _chunk_len(T, world_size, layout)
    return [
        [
            c * c * len(_step_pairs(r, (r - s) % world_size, world_size, layout, c, is_causal))
            for r in range(world_size)
        ]
        for s in range(world_size)
    ]


def _peer(group, r: int) -> int:
    """Global rank of rank ``r`` of ``group`` (isend/irecv take global ranks)."""
    return r if group is None else dist.get_global_rank(group, r)


def ring_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    layout: str = "contiguous",
    group: dist.ProcessGroup | None = None,
    stats: dict | None = None,
) -> torch.Tensor:
    """This rank's part of softmax(Q Kᵀ · scale) V over the whole sequence (call on every rank).

    ``query``, ``key``, ``value`` are this rank's :func:`shard` of the full tensors (the same
    ``layout`` on every rank). ``is_causal`` uses global positions: query ``i`` sees keys
    ``j <= i``. If ``stats`` is a dict it receives ``bytes_sent`` and ``scores_computed`` per step.

    Shape:
        query: (..., T/P, D); key: (..., T/P, D); value: (..., T/P, Dv). Returns (..., T/P, Dv).
    """
    check_qkv(query, key, value)
    if key.shape[-2] != query.shape[-2]:
        raise ValueError(
            f"key: expected this rank's block (..., T/P, D) with T/P = "
            f"{query.shape[-2]} as query, got {shape_str(key)}"
        )
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    c = _chunk_len(query.shape[-2] * P, P, layout)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    q = query * scale  # (..., T/P, D)
    lead, n_q = q.shape[:-2], q.shape[-2] // c
    m = q.new_full((*lead, n_q, c), float("-inf"))  # per query chunk: (..., n_q, c)
    row_sum = q.new_zeros((*lead, n_q, c))
    acc = q.new_zeros((*lead, n_q, c, value.shape[-1]))  # (..., n_q, c, Dv)
    ahead, behind = _peer(group, (rank + 1) % P), _peer(group, (rank - 1) % P)
    k_cur, v_cur = key.contiguous(), value.contiguous()
    log = {"bytes_sent": [], "scores_computed": []}
    for step in range(P):
        reqs = []
        if step < P - 1:  # start passing the block on before computing with it: overlap
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            # One batch of paired sends and receives (NCCL deadlocks on unpaired isend/irecv;
            # gloo takes the batch too). Within a pair of ranks, K goes before V both ways.
            reqs = dist.batch_isend_irecv(
                [
                    dist.P2POp(dist.isend, k_cur, ahead, group),
                    dist.P2POp(dist.isend, v_cur, ahead, group),
                    dist.P2POp(dist.irecv, k_next, behind, group),
                    dist.P2POp(dist.irecv, v_next, behind, group),
                ]
            )
        log["bytes_sent"].append(k_cur.nbytes + v_cur.nbytes if reqs else 0)
        done = 0
        for q0, qn, k0, kn, crosses in _step_pairs(
            rank, (rank - step) % P, P, layout, c, is_causal
        ):
            k_blk = k_cur[..., kn * c : (kn + 1) * c, :]  # (..., c, D)
            scores = q[..., qn * c : (qn + 1) * c, :] @ k_blk.transpose(-2, -1)  # (..., c, c)
            if crosses:  # mask key positions after the query position
                rows = torch.arange(q0, q0 + c, device=q.device).unsqueeze(-1)  # (c, 1)
                cols = torch.arange(k0, k0 + c, device=q.device)  # (c,)
                scores = scores.masked_fill(cols > rows, float("-inf"))
            m[..., qn, :], row_sum[..., qn, :], acc[..., qn, :, :] = online_softmax_update(
                m[..., qn, :],
                row_sum[..., qn, :],
                acc[..., qn, :, :],
                scores,
                v_cur[..., kn * c : (kn + 1) * c, :],
            )
            done += c * c
        log["scores_computed"].append(done)
        for r in reqs:
            r.wait()
        if reqs:
            k_cur, v_cur = k_next, v_next
    if stats is not None:
        stats.update(log)
    out = acc / row_sum.unsqueeze(-1)  # (..., n_q, c) -> (..., n_q, c, 1); no row is empty
    return out.flatten(-3, -2)  # (..., n_q, c, Dv) -> (..., T/P, Dv)

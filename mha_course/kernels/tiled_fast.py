"""Chapter 9, beside the lesson: the same tiled attention with the passes over each tile cut.

:func:`mha_course.kernels.tiled.tiled_attention` is the version chapter 9 teaches (every step
of the online softmax written out). This one computes the same thing, to rounding, with the
tricks a real kernel uses to touch each (block_q, block_k) tile of scores as few times as
possible; ``benchmarks/tiled_vs_sdpa.py`` times both against torch's SDPA.

1. **The running sum is taken while the tile is still in cache**, right after its ``exp``. (A
   column of ones on the values, ``p @ [V | 1]``, would give ``rowsum(p)`` from the matmul
   itself, but a 65th column cost that matmul about 20 % on one core of an AMD Zen 5: its kernel
   works in vectors of 16 floats. The sum costs about 3 %.)
2. **The maximum is subtracted inside the matmul.** Queries get a column holding ``-m`` (the
   row's reference, see 3) and keys a column of ones, so ``[q | -m] @ [k | 1]ᵀ = q kᵀ - m``.
3. **The reference starts at a bound and moves lazily** (FlashAttention 4 moves it lazily too).
   ``exp(s - m)`` is exact for any reference ``m``: it must only not overflow, nor leave every
   term of a row tiny. Each row starts at ``m = |q| · max |k|``, which no score can pass
   (Cauchy-Schwarz). If the first tile's maximum lies within ``LAZY_MARGIN`` of it in every row,
   no later tile can pass ``m`` and none is read for its maximum. If not (large or outlying
   scores make the bound loose), the block starts again from its first tile's own maximum, as
   the teaching version does (``s - m`` computed against a loose bound carries its rounding,
   eps·|bound|), and so does every later block of the call; a later tile is then read for its
   maximum unless the bound is within ``LAZY_MARGIN`` of ``m``, and while no score passes ``m``
   by more than ``LAZY_MARGIN`` the tile is exponentiated as it is, else ``m`` moves up and the
   accumulator is rescaled (the teaching version's step). Per tile, where the bound holds: one
   matmul writes it, one in-place ``exp`` (and on the diagonal ``tril_``) and the second matmul
   read it.
4. **All heads in one batched matmul**, scores written into one reused buffer; tiles wholly above
   the diagonal are never computed. On a tile that crosses it, where the bound holds (3), the
   scores above the diagonal are left in (no score passes ``m`` there either) and zeroed after
   ``exp`` by ``tril_``: torch's ``exp`` is several times slower on a tile holding -inf. A tile
   read for its maximum gets the -inf mask added by the matmul itself (``baddbmm``) instead.
5. **The diagonal in narrow tiles** (causal): a block of query rows reads its own keys in tiles of
   ``DIAGONAL_TILE`` keys, each multiplied by the rows that see it only, so a tall query block
   (fewer, larger matmuls) wastes no more of the square above the diagonal than a short one.

Memory stays linear in L: the largest intermediate is (B·H, block_q, block_k) plus copies of
Q and K one column wider.
"""

from __future__ import annotations

import math

import torch

from mha_course.kernels.tiled import _check_inputs

# exp(s - m) for s - m <= 16 stays below 9e6; summed over 2**20 keys it is < 1e13, far from
# float32's overflow (3.4e38). A row whose scores pass m + LAZY_MARGIN is rescaled. Starting
# from the bound, every row's first maximum is within LAZY_MARGIN below it, so its largest term
# is >= exp(-16) = 1e-7, far from float32's smallest normal number, 1e-38. 16-bit inputs are
# computed in float32 (float16 itself would overflow at 65504).
LAZY_MARGIN = 16.0
# causal: a query block's own keys (the diagonal) are read in tiles of this many keys, each seen
# only by the rows at or below it (trick 5 above)
DIAGONAL_TILE = 128


def tiled_attention_fast(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 512,
) -> torch.Tensor:
    """softmax(Q Kᵀ · scale) V tile by tile, as :func:`tiled_attention`, with fewer passes.

    No gradients (use :func:`tiled_attention` or the FlashAttention backward of chapter 9 for
    training); ``is_causal`` is top-left aligned, as torch's SDPA.

    Shape:
        query: (..., L, D); key: (..., S, D); value: (..., S, Dv). Returns (..., L, Dv).
    """
    _check_inputs(query, key, value, block_q, block_k)
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    lead, Dv = query.shape[:-2], value.shape[-1]
    n = math.prod(lead)
    if S == 0 or L == 0:  # no key: empty weights, an output of 0 (SDPA's); no query: empty
        return query.new_zeros(*lead, L, Dv)
    if query.dtype in (torch.float16, torch.bfloat16):
        args = (query.float(), key.float(), value.float(), is_causal, scale, block_q, block_k)
        return tiled_attention_fast(*args).to(query.dtype)
    with torch.no_grad():
        q_aug = query.new_empty(n, L, D + 1)  # [q * scale | -m]
        torch.mul(query.reshape(n, L, D), scale, out=q_aug[..., :D])
        k_aug = _with_ones(key.reshape(n, S, D))  # [k | 1]
        v = value.reshape(n, S, Dv)  # (..., S, Dv) -> (n, S, Dv)
        k_t = k_aug.transpose(1, 2)  # (n, D + 1, S)
        # the first reference of each row: |q| · max |k| bounds every score (Cauchy-Schwarz)
        k_longest = torch.linalg.vector_norm(key.reshape(n, S, D), dim=-1).amax(-1)  # (n,)
        bound = torch.linalg.vector_norm(q_aug[..., :D], dim=-1, keepdim=True)  # (n, L, 1)
        bound.mul_(k_longest.view(n, 1, 1))
        bound.nan_to_num_(posinf=torch.finfo(bound.dtype).max)  # the squares may overflow
        out = query.new_empty(n, L, Dv)
        widest = max(block_k, block_q) if is_causal else block_k  # causal: the diagonal tile
        buf = query.new_empty(n * min(block_q, L) * min(widest, S))  # every tile's scores
        from_bound = True  # until a block finds the bound loose, then each block's first tile
        for i0 in range(0, L, block_q):
            i1 = min(i0 + block_q, L)
            blk = (q_aug[:, i0:i1], k_t, v, out[:, i0:i1], bound[:, i0:i1])
            from_bound = _query_block(*blk, i0, is_causal, block_k, buf, from_bound)
    return out.reshape(*lead, L, Dv)


def _with_ones(x: torch.Tensor) -> torch.Tensor:
    """``[x | 1]``: x with a column of ones appended.

    Shape:
        x: (n, S, D). Returns (n, S, D + 1).
    """
    return torch.cat([x, x.new_ones(*x.shape[:-1], 1)], dim=-1)  # (n, S, D) -> (n, S, D + 1)


def _scores(q_rows, k_tile, mask, out) -> None:
    """``q_rows @ k_tile (+ mask)`` written into ``out``: the matmul adds the mask itself.

    Shape:
        q_rows: (n, rows, D + 1); k_tile: (n, D + 1, Bk); mask: (rows, Bk) or None;
        out: (n, rows, Bk).
    """
    if mask is None:
        torch.bmm(q_rows, k_tile, out=out)
    else:
        torch.baddbmm(mask, q_rows, k_tile, out=out)


def _query_block(q_aug, k_t, v, out, bound, i0, is_causal, block_k, buf, from_bound) -> bool:
    """One block of query rows against every key tile it sees; writes ``out`` in place.
    Returns whether the next block should start from the bound (it was not loose here).

    Shape:
        q_aug: (n, Bq, D + 1); k_t: (n, D + 1, S); v: (n, S, Dv); out: (n, Bq, Dv);
        bound: (n, Bq, 1), |q| · max |k|, no score of its row is larger.
    """
    n, bq, _ = q_aug.shape
    S = k_t.shape[-1]
    # (j0, j1, r0): keys j0..j1-1, seen by the block's rows r0.. (row r is query i0 + r).
    # causal: keys before the block's first row in tiles of block_k, every row; then the block's
    # own keys (the diagonal) in tiles of DIAGONAL_TILE, keys j0.. seen by rows j0 - i0.. only,
    # so a large block computes no more of the (Bq, Bq) square above the diagonal than a small
    # one; keys past the block's last row are never computed
    k_end = min(S, i0) if is_causal else S
    tiles = [(j0, min(j0 + block_k, k_end), 0) for j0 in range(0, k_end, block_k)]
    if is_causal:
        diag_end = min(S, i0 + bq)
        tiles += [
            (j0, min(j0 + DIAGONAL_TILE, diag_end), j0 - i0)
            for j0 in range(i0, diag_end, DIAGONAL_TILE)
        ]
        # relative mask of a diagonal tile: row r0 + r sees key j0 + c iff c <= r (j0 = i0 + r0)
        above = torch.ones(bq, DIAGONAL_TILE, dtype=torch.bool, device=q_aug.device).triu_(1)
        diag_mask = torch.zeros(bq, DIAGONAL_TILE, dtype=q_aug.dtype, device=q_aug.device)
        diag_mask.masked_fill_(above, float("-inf"))  # (Bq, DIAGONAL_TILE)
    acc = None  # (n, Bq, Dv): the unnormalised output
    row_sum = None  # (n, Bq, 1): the running sum of the weights
    m = bound.clone() if from_bound else torch.zeros_like(bound)  # (n, Bq, 1) the reference
    bounded = from_bound  # no score of a row passes its m by more than LAZY_MARGIN: no max read
    q_aug[..., -1:] = -m  # the matmuls below then subtract m from every score
    for j0, j1, r0 in tiles:
        rows = bq - r0
        scores = buf[: n * rows * (j1 - j0)].view(n, rows, j1 - j0)
        q_rows = q_aug[:, r0:]  # (n, Bq, D + 1) -> (n, rows, D + 1), a view
        crosses = is_causal and j1 - 1 > i0 + r0  # the diagonal: keys j > i are masked
        read_max = acc is None or not bounded  # this tile is read for its maximum
        # read for its maximum, the matmul adds -inf above the diagonal; otherwise no score
        # passes m + LAZY_MARGIN there either, and their exp is zeroed after it (exp is slow on
        # -inf)
        mask = diag_mask[:rows, : j1 - j0] if crosses and read_max else None
        _scores(q_rows, k_t[..., j0:j1], mask, out=scores)  # s - m
        if acc is None:  # first tile (every row sees it, so its maximum is finite)
            if from_bound and bool((scores.amax(dim=-1) < -LAZY_MARGIN).any()):
                # s - m <= 0, but some row's first maximum lies far below its bound: that
                # rounding is eps·|bound|; start again from the tile's own scores
                from_bound = False
                m.zero_()
                q_aug[..., -1] = 0.0
                _scores(q_rows, k_t[..., j0:j1], mask, out=scores)
            if not from_bound:  # m = the tile's maximum, exact (as the teaching version)
                m.copy_(scores.amax(dim=-1, keepdim=True))
                scores.sub_(m)
                q_aug[..., -1:] = -m
                # a bound within LAZY_MARGIN of m: no later score passes m by more either
                bounded = bool((bound - m <= LAZY_MARGIN).all())
        elif not bounded:
            top = scores.amax(dim=-1, keepdim=True)  # (n, rows, 1): s - m
            if bool((top > LAZY_MARGIN).any()):  # some row grew too much: move its reference
                shift = top.clamp(min=0.0)
                scores.sub_(shift)
                m[:, r0:] += shift  # (n, rows, 1): the rows of this tile
                q_aug[:, r0:, -1:] = -m[:, r0:]
                rescale = torch.exp(-shift)
                acc[:, r0:].mul_(rescale)
                row_sum[:, r0:].mul_(rescale)
        p = scores.exp_()
        if mask is None and crosses:
            p.tril_()  # row r0 + r sees key j0 + c iff c <= r
        if acc is None:
            acc = torch.bmm(p, v[:, j0:j1])
            row_sum = p.sum(dim=-1, keepdim=True)
        else:
            acc[:, r0:].baddbmm_(p, v[:, j0:j1])
            row_sum[:, r0:] += p.sum(dim=-1, keepdim=True)
    torch.div(acc, row_sum, out=out)
    return from_bound

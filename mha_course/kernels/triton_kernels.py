"""Chapter 17: the FlashAttention-2 kernels themselves, as ``@triton.jit`` functions.

Three GPU kernels and their tile helpers: the forward (``_fwd_kernel``, one program per (query
block, batch·head), chapter 9's online softmax), dQ (``_bwd_dq_kernel``, one program per query
block) and dK/dV (``_bwd_dkdv_kernel``, one program per (key block, batch·kv-head), summing over
the query heads of its GQA group). :mod:`mha_course.kernels.triton_flash` launches them and makes
them one differentiable function.

They are defined only when Triton is installed (the optional extra); importing
:mod:`mha_course.kernels.triton_setup` first sets ``TRITON_INTERPRET=1`` on a machine without
CUDA, before ``@triton.jit`` reads it.
"""

from __future__ import annotations

# first: it sets TRITON_INTERPRET (on a machine without CUDA) before Triton is imported
from mha_course.kernels.triton_setup import tl, triton

if triton is not None:

    @triton.jit
    def _load_tile(ptr, rows, n_rows, cols_d, D):
        """The (len(rows), BLOCK_D) tile of a row-major (n_rows, D) matrix; zeros outside it."""
        mask = (rows < n_rows)[:, None] & (cols_d < D)[None, :]
        return tl.load(ptr + rows[:, None] * D + cols_d[None, :], mask=mask, other=0.0)

    @triton.jit
    def _store_tile(ptr, tile, rows, n_rows, cols_d, D):
        mask = (rows < n_rows)[:, None] & (cols_d < D)[None, :]
        tl.store(
            ptr + rows[:, None] * D + cols_d[None, :], tile.to(ptr.dtype.element_ty), mask=mask
        )

    @triton.jit
    def _keep(rows, cols, L, S, IS_CAUSAL: tl.constexpr):
        """Which (query row, key column) pairs exist — the ragged last blocks are cut at L and S
        — and, with IS_CAUSAL (top-left aligned), have column <= row."""
        keep = (rows < L)[:, None] & (cols < S)[None, :]
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        return keep

    @triton.jit
    def _fwd_kernel(
        Q,
        K,
        V,
        Out,
        LSE,
        scale,
        L,
        S,
        D,
        H,
        G,
        IS_CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        start_m = tl.program_id(0) * BLOCK_M
        bh = tl.program_id(1)  # b * H + h
        kv = (bh // H) * G + (bh % H) // (H // G)  # GQA: b * G + the kv head of query head h
        rows = start_m + tl.arange(0, BLOCK_M)
        cols_d = tl.arange(0, BLOCK_D)
        q = _load_tile(Q + bh * L * D, rows, L, cols_d, D)  # (BLOCK_M, BLOCK_D)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S  # causal: later keys unseen
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            k = _load_tile(K + kv * S * D, cols, S, cols_d, D)  # (BLOCK_N, BLOCK_D)
            v = _load_tile(V + kv * S * D, cols, S, cols_d, D)
            scores = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N), float32
            # Padded query rows (>= L) are kept here: they are never stored, and cutting them
            # would leave rows of only -inf. Key columns >= S and the causal future are cut.
            scores = tl.where(_keep(rows, cols, L + BLOCK_M, S, IS_CAUSAL), scores, float("-inf"))
            # Chapter 9's online softmax (block 0 holds key 0, so m is finite after it: no NaN).
            m_new = tl.maximum(m, tl.max(scores, 1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(scores - m_new[:, None])
            row_sum = alpha * row_sum + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        _store_tile(Out + bh * L * D, acc / row_sum[:, None], rows, L, cols_d, D)
        tl.store(LSE + bh * L + rows, m + tl.log(row_sum), mask=rows < L)

    @triton.jit
    def _bwd_dq_kernel(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DQ,
        scale,
        L,
        S,
        D,
        H,
        G,
        IS_CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        start_m = tl.program_id(0) * BLOCK_M
        bh = tl.program_id(1)
        kv = (bh // H) * G + (bh % H) // (H // G)
        rows = start_m + tl.arange(0, BLOCK_M)
        cols_d = tl.arange(0, BLOCK_D)
        q = _load_tile(Q + bh * L * D, rows, L, cols_d, D)
        do = _load_tile(DO + bh * L * D, rows, L, cols_d, D)
        lse = tl.load(LSE + bh * L + rows, mask=rows < L, other=0.0)
        delta = tl.load(DELTA + bh * L + rows, mask=rows < L, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        hi = tl.minimum(S, start_m + BLOCK_M) if IS_CAUSAL else S
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            k = _load_tile(K + kv * S * D, cols, S, cols_d, D)
            v = _load_tile(V + kv * S * D, cols, S, cols_d, D)
            p = tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None])  # the weights, recomputed
            p = tl.where(_keep(rows, cols, L, S, IS_CAUSAL), p, 0.0)
            dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k)
        _store_tile(DQ + bh * L * D, dq * scale, rows, L, cols_d, D)

    @triton.jit
    def _bwd_dkdv_kernel(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DK,
        DV,
        scale,
        L,
        S,
        D,
        H,
        G,
        IS_CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        start_n = tl.program_id(0) * BLOCK_N
        bg = tl.program_id(1)  # b * G + g
        cols = start_n + tl.arange(0, BLOCK_N)
        cols_d = tl.arange(0, BLOCK_D)
        k = _load_tile(K + bg * S * D, cols, S, cols_d, D)  # (BLOCK_N, BLOCK_D), stays put
        v = _load_tile(V + bg * S * D, cols, S, cols_d, D)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        lo = (start_n // BLOCK_M) * BLOCK_M if IS_CAUSAL else 0  # causal: rows < start_n see none
        group = H // G
        first_h = (bg // G) * H + (bg % G) * group  # b * H + the first query head of group g
        for bh in range(first_h, first_h + group):  # the query heads that read this kv head
            for start_m in range(lo, L, BLOCK_M):
                rows = start_m + tl.arange(0, BLOCK_M)
                q = _load_tile(Q + bh * L * D, rows, L, cols_d, D)
                do = _load_tile(DO + bh * L * D, rows, L, cols_d, D)
                lse = tl.load(LSE + bh * L + rows, mask=rows < L, other=0.0)
                delta = tl.load(DELTA + bh * L + rows, mask=rows < L, other=0.0)
                # The tile transposed, (BLOCK_N, BLOCK_M): keys along rows, as dK_j and dV_j.
                p_t = tl.exp(tl.dot(k, tl.trans(q)) * scale - lse[None, :])
                keep_t = (cols < S)[:, None] & (rows < L)[None, :]  # _keep, transposed
                if IS_CAUSAL:
                    keep_t = keep_t & (cols[:, None] <= rows[None, :])
                p_t = tl.where(keep_t, p_t, 0.0)
                dv += tl.dot(p_t.to(do.dtype), do)
                dp_t = tl.dot(v, tl.trans(do))  # (BLOCK_N, BLOCK_M)
                ds_t = p_t * (dp_t - delta[None, :])
                dk += tl.dot(ds_t.to(q.dtype), q)
        _store_tile(DK + bg * S * D, dk * scale, cols, S, cols_d, D)
        _store_tile(DV + bg * S * D, dv, cols, S, cols_d, D)

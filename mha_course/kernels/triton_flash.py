"""Chapter 17: FlashAttention-2 forward and backward as Triton kernels.

The same algorithm as :mod:`mha_course.kernels.tiled` (forward) and :mod:`mha_course.kernels.flash_backward`
(backward), written as three GPU kernels: one program per (query block, batch·head) for the
forward and for dQ, one per (key block, batch·kv-head) for dK and dV. GQA: query head ``h``
reads key/value head ``h // (H // G)``; the dK/dV program sums over the ``H // G`` query heads
of its group, so no key/value head is ever repeated in memory.

Triton is an optional extra (``pip install -e ".[triton]"`` in the course folder). Without a CUDA device the
kernels run in Triton's interpreter on CPU tensors: this module sets ``TRITON_INTERPRET=1`` when
no CUDA device is present and the variable is unset (``@triton.jit`` reads it when it decorates
a kernel, so it must be set before this module is imported — it is, here). Slow, but it runs the
very same kernel code, which is how the tests check it. In the interpreter, ``tl.dot`` on
bfloat16 gives wrong values (Triton 3.9): use float32 or float16 there.
"""

from __future__ import annotations

import math

import torch

from mha_course.kernels.triton_dq import launch_dq

# first: it sets TRITON_INTERPRET (on a machine without CUDA) before Triton is imported
from mha_course.kernels.triton_setup import (  # noqa: F401 (public names re-exported here)
    INSTALL_HINT,
    _block_d,
    _blocks,
    _check,
    _check_block,
    _check_saved,
    _num_warps,
    _require_triton,
    backward_blocks,
    interpreted,
    tl,
    triton,
    triton_available,
)

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


def launch_forward(kernel, query, key, value, is_causal=False, scale=None, block_q=64, block_k=64):
    """Launch a forward kernel of the course's signature on (Q, K, V); returns (O, lse).

    ``kernel(Q, K, V, Out, LSE, scale, L, S, D, H, G, IS_CAUSAL, BLOCK_M, BLOCK_N, BLOCK_D)``:
    one program per (query block, batch·head), grid ``(cdiv(L, block_q), B * H)``; ``Out`` is
    allocated like ``query``, ``LSE`` as float32 (B, H, L); ``BLOCK_D`` is D rounded up to a
    power of 2 (at least 16, ``tl.dot``'s minimum). :func:`triton_forward` launches the course's
    kernel with it; exercise 17 launches the learner's.

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D). Returns (B, H, L, D), (B, H, L).
    """
    _require_triton()
    block_q, block_k = _blocks(block_q, block_k)
    _check(query, key, value)
    q, k, v = (t.contiguous() for t in (query, key, value))
    B, H, L, D = q.shape
    G, S = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if S == 0 or L == 0:  # no key (or no query): zeros, as SDPA and the course; no launch
        return torch.zeros_like(q), torch.full((B, H, L), float("-inf"), device=q.device)
    out = torch.empty_like(q)
    lse = torch.empty(B, H, L, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(L, block_q), B * H)
    kernel[grid](
        q,
        k,
        v,
        out,
        lse,
        scale,
        L,
        S,
        D,
        H,
        G,
        IS_CAUSAL=is_causal,
        BLOCK_M=block_q,
        BLOCK_N=block_k,
        BLOCK_D=_block_d(D),
        num_warps=_num_warps(D),
    )
    return out, lse


def triton_forward(query, key, value, is_causal=False, scale=None, block_q=64, block_k=64):
    """Run the forward kernel; returns (O, lse) with lse in float32.

    ``block_q`` query rows per program (the kernel's BLOCK_M), ``block_k`` keys per step
    (BLOCK_N).

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D). Returns (B, H, L, D), (B, H, L).
    """
    _require_triton()
    block_q, block_k = _blocks(block_q, block_k)
    return launch_forward(_fwd_kernel, query, key, value, is_causal, scale, block_q, block_k)


def triton_backward(
    query,
    key,
    value,
    out,
    lse,
    d_out,
    is_causal=False,
    scale=None,
    block_q=None,
    block_k=None,
    *,
    dkdv_blocks=None,
):
    """Run the two backward kernels (dQ through :func:`~mha_course.kernels.triton_dq.launch_dq`); D =
    rowsum(dO ∘ O) is one torch line before each.

    (The Triton launch; :mod:`mha_course.kernels.flash_backward` is the PyTorch version it follows.)
    ``block_q``/``block_k`` are the dQ kernel's tile, ``dkdv_blocks`` the dK/dV kernel's
    (block_q, block_k); by default :func:`backward_blocks` for this D.

    Shape:
        query, out, d_out: (B, H, L, D); key, value: (B, G, S, D); lse: (B, H, L).
        Returns dQ (B, H, L, D), dK, dV (B, G, S, D).
    """
    _require_triton()
    _check(query, key, value)
    _check_saved(query, out, lse, d_out)
    D = query.shape[-1]
    default_dq, default_dkdv = backward_blocks(D)
    dq_q, dq_k = _blocks(
        default_dq[0] if block_q is None else block_q, default_dq[1] if block_k is None else block_k
    )
    if dkdv_blocks is None:
        dkdv_blocks = default_dkdv
    if not isinstance(dkdv_blocks, (tuple, list)) or len(dkdv_blocks) != 2:
        raise ValueError(f"dkdv_blocks: expected a pair (block_q, block_k), got {dkdv_blocks!r}")
    kv_q, kv_k = (_check_block(f"dkdv_blocks[{i}]", b) for i, b in enumerate(dkdv_blocks))
    q, k, v, o, do = (t.contiguous() for t in (query, key, value, out, d_out))
    B, H, L, _ = q.shape
    G, S = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if S == 0 or L == 0:  # nothing attended: every gradient is zero; no launch
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    lse = lse.contiguous()
    dq = launch_dq(_bwd_dq_kernel, q, k, v, o, lse, do, is_causal, scale, dq_q, dq_k)
    delta = (do.float() * o.float()).sum(-1)  # (B, H, L, D) -> (B, H, L): the D term
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    common = dict(IS_CAUSAL=is_causal, BLOCK_D=_block_d(D), num_warps=_num_warps(D))
    _bwd_dkdv_kernel[(triton.cdiv(S, kv_k), B * G)](
        q, k, v, do, lse, delta, dk, dv, scale, L, S, D, H, G, BLOCK_M=kv_q, BLOCK_N=kv_k, **common
    )
    return dq, dk, dv


class TritonFlashAttention(torch.autograd.Function):
    """The Triton forward, saving (Q, K, V, O, lse); the Triton backward."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, block_q, block_k, backward):
        out, lse = triton_forward(query, key, value, is_causal, scale, block_q, block_k)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.args = (is_causal, scale, backward)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        query, key, value, out, lse = ctx.saved_tensors
        is_causal, scale, (dq_blocks, dkdv_blocks) = ctx.args
        dq, dk, dv = triton_backward(
            query,
            key,
            value,
            out,
            lse,
            d_out,
            is_causal,
            scale,
            *dq_blocks,
            dkdv_blocks=dkdv_blocks,
        )
        return dq, dk, dv, None, None, None, None, None


def triton_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
    *,
    backward: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> torch.Tensor:
    """FlashAttention-2 in Triton, differentiable. ``is_causal`` is top-left aligned (as SDPA).

    ``block_q``/``block_k``: the forward's tile (the kernel's BLOCK_M, BLOCK_N). ``backward``:
    the (block_q, block_k) of the dQ and of the dK/dV kernel, by default
    :func:`backward_blocks` (smaller for wide heads). Raises ImportError saying what to install
    when Triton is missing.

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D) with G dividing H. Returns (B, H, L, D).
    """
    _require_triton()
    block_q, block_k = _blocks(block_q, block_k)
    _check(query, key, value)
    if backward is None:
        backward = backward_blocks(query.shape[-1])
    ok = (
        isinstance(backward, (tuple, list))
        and len(backward) == 2
        and all(isinstance(b, (tuple, list)) and len(b) == 2 for b in backward)
    )
    if not ok:
        raise ValueError(
            f"backward: expected ((block_q, block_k) of dQ, (block_q, block_k) of "
            f"dK/dV), got {backward!r}"
        )
    for name, pair in zip(("backward[0]", "backward[1]"), backward):
        for b in pair:
            _check_block(name, b)
    return TritonFlashAttention.apply(
        query, key, value, is_causal, scale, block_q, block_k, tuple(map(tuple, backward))
    )

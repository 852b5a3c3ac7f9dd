"""Chapter 17: FlashAttention-2 forward and backward as Triton kernels.

The same algorithm as :mod:`mha_course.kernels.tiled` (forward) and :mod:`mha_course.kernels.flash_backward`
(backward), written as three GPU kernels (:mod:`mha_course.kernels.triton_kernels`): one program
per (query block, batch·head) for the forward and for dQ, one per (key block, batch·kv-head) for
dK and dV. GQA: query head ``h`` reads key/value head ``h // (H // G)``; the dK/dV program sums
over the ``H // G`` query heads of its group, so no key/value head is ever repeated in memory.
This module launches them (:func:`launch_forward`, :func:`triton_forward`,
:func:`triton_backward`) and makes them one differentiable function
(:func:`triton_flash_attention`).

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

if triton is not None:  # the kernels exist only with Triton (the optional extra)
    from mha_course.kernels.triton_kernels import (  # noqa: F401 (public names re-exported here)
        _bwd_dkdv_kernel,
        _bwd_dq_kernel,
        _fwd_kernel,
        _keep,
        _load_tile,
        _store_tile,
    )


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

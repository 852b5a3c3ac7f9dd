"""Chapter 17's dQ launch: :func:`launch_dq` runs a dQ kernel of the course's signature (the
course's ``_bwd_dq_kernel`` through :func:`~mha_course.kernels.triton_flash.triton_backward`, the
learner's in exercise 17), as :func:`~mha_course.kernels.triton_flash.launch_forward` runs a forward.

On a GPU, the lanes a masked ``tl.load`` leaves out hold whatever the registers held unless
``other=`` gives them a value; Triton's interpreter fills them with zeros, which hides a missing
``other=0.0`` that a GPU would turn into garbage. Under the interpreter this launch makes those
lanes NaN instead (:func:`undefined_lanes_are_nan`), so the mistake shows on the CPU too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import torch

from mha_course.kernels.triton_setup import (
    _block_d,
    _blocks,
    _check,
    _check_saved,
    _num_warps,
    _require_triton,
    interpreted,
    triton,
)


@contextlib.contextmanager
def undefined_lanes_are_nan() -> Iterator[None]:
    """While active, under ``TRITON_INTERPRET=1``: a masked float ``tl.load`` without ``other``
    reads NaN in its masked-off lanes (the interpreter reads 0 there; a GPU leaves them
    undefined). Elsewhere (a compiled kernel, another Triton) it changes nothing."""
    builder = None
    if interpreted():
        try:
            from triton.runtime import interpreter as ti

            builder, original = ti.InterpreterBuilder, ti.InterpreterBuilder.create_masked_load
        except (ImportError, AttributeError):
            builder = None
    if builder is None:
        yield
        return

    def masked_load(self, ptrs, mask, other, *args, **kwargs):
        if other is None:
            dtype_tt = ptrs.get_element_ty()
            dtype_np = ti._get_np_dtype(dtype_tt)
            if np.issubdtype(dtype_np, np.floating):
                other = ti.TensorHandle(np.full(ptrs.data.shape, np.nan, dtype=dtype_np), dtype_tt)
        return original(self, ptrs, mask, other, *args, **kwargs)

    builder.create_masked_load = masked_load
    try:
        yield
    finally:
        builder.create_masked_load = original


def launch_dq(
    kernel, query, key, value, out, lse, d_out, is_causal=False, scale=None, block_q=64, block_k=64
) -> torch.Tensor:
    """Launch a dQ kernel of the course's signature on the forward's saved tensors; returns dQ.

    ``kernel(Q, K, V, DO, LSE, DELTA, DQ, scale, L, S, D, H, G, IS_CAUSAL, BLOCK_M, BLOCK_N,
    BLOCK_D)``: one program per (query block, batch·head), grid ``(cdiv(L, block_q), B * H)``.
    ``DELTA`` is the backward's row term D = rowsum(dO ∘ O), float32 (B, H, L), computed here;
    ``DQ`` is allocated like ``query`` and filled with NaN, so a row the kernel never stores
    shows. ``BLOCK_D`` is D rounded up to a power of 2 (at least 16). Under the interpreter,
    masked-off lanes loaded without ``other`` read NaN (:func:`undefined_lanes_are_nan`).

    Shape:
        query, out, d_out: (B, H, L, D); key, value: (B, G, S, D); lse: (B, H, L) float32.
        Returns dQ (B, H, L, D).
    """
    _require_triton()
    block_q, block_k = _blocks(block_q, block_k)
    _check(query, key, value)
    _check_saved(query, out, lse, d_out)
    q, k, v, o, do = (t.contiguous() for t in (query, key, value, out, d_out))
    B, H, L, D = q.shape
    G, S = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    if S == 0 or L == 0:  # nothing attended: the gradient is zero; no launch
        return torch.zeros_like(q)
    delta = (do.float() * o.float()).sum(-1)  # (B, H, L, D) -> (B, H, L): the D term
    dq = torch.full_like(q, float("nan"))
    with undefined_lanes_are_nan():
        kernel[(triton.cdiv(L, block_q), B * H)](
            q,
            k,
            v,
            do,
            lse.contiguous(),
            delta,
            dq,
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
    return dq

"""Chapter 17's Triton set-up, shared by the forward/backward kernels (``triton_flash``) and the
dQ launch (``triton_dq``): Triton imported in its CPU interpreter where there is no GPU, the tile
sizes, and the checks every launch makes before a kernel reads memory it was not given.
"""

from __future__ import annotations

import os
import sys

import torch

from mha_course._checks import (
    check_kv_heads,
    check_positive_int,
    check_qkv,
    check_rank,
    check_shape,
    shape_str,
)

# Triton decorates its own library (tl.max's combine function, ...) when it is first imported, so
# if something imported it before this module set the variable (torch.utils.flop_counter does),
# those stay compiled-only and the interpreter fails; we say so when a kernel is called.
_SET_TOO_LATE = False
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    _SET_TOO_LATE = "triton" in sys.modules
    os.environ["TRITON_INTERPRET"] = "1"  # read by @triton.jit below

try:
    import triton
    import triton.language as tl
except ImportError:  # the optional extra is missing
    triton = tl = None

INSTALL_HINT = (
    'Triton is not installed: in the course folder, pip install -e ".[triton]" '
    '(or pip install "triton>=3.0"); a CUDA build of torch already ships its own. Triton '
    "publishes Linux wheels only: on macOS or Windows the extra installs nothing (use Linux, "
    "e.g. WSL, for these cells)."
)


def triton_available() -> bool:
    """Whether the kernels can run here (Triton importable)."""
    return triton is not None


def interpreted() -> bool:
    """Whether Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _require_triton() -> None:
    if triton is None:
        raise ImportError(INSTALL_HINT)
    if _SET_TOO_LATE:
        raise RuntimeError(
            "Triton was imported before mha_course.kernels.triton_flash could set TRITON_INTERPRET=1, so "
            "its interpreter cannot run these kernels on the CPU. Set TRITON_INTERPRET=1 before "
            "anything imports triton (e.g. first line of the notebook or script), or import "
            "mha_course.kernels.triton_flash first, and restart."
        )


def _block_d(D: int) -> int:
    return max(16, 1 << (D - 1).bit_length())  # tl.arange needs a power of 2; tl.dot needs >= 16


def _num_warps(D: int) -> int:
    """Warps per program: 8 when a head is wider than 64, so a (64, D) float32 accumulator
    still fits the registers (4 warps of 32 threads would hold 128 floats each per tile)."""
    return 8 if D > 64 else 4


def backward_blocks(D: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Default (block_q, block_k) of the dQ kernel and of the dK/dV kernel for head size D.

    Each backward program keeps four (block, D) tiles of inputs and two float32 accumulators,
    twice the forward's, so wide heads take smaller tiles: at D > 64 the streamed side is 32
    rows, as in Triton's fused-attention tutorial (its dK/dV kernel streams 32 query rows over
    resident keys, its dQ kernel 32 key rows over resident queries). Not yet tuned on a GPU.
    """
    check_positive_int("D", D, "(head size)")
    if D > 64:
        return (64, 32), (32, 64)
    return (64, 64), (64, 64)


def _check_block(name: str, blk: object) -> int:
    if isinstance(blk, bool) or not isinstance(blk, int) or blk < 16 or blk & (blk - 1):
        raise ValueError(f"{name}: expected a power of 2 >= 16 (tl.dot's minimum), got {blk!r}")
    return blk


def _blocks(block_q, block_k) -> tuple[int, int]:
    """The (query rows, keys) tile, each checked (the kernels call them BLOCK_M, BLOCK_N)."""
    return _check_block("block_q", block_q), _check_block("block_k", block_k)


def _check(query, key, value):
    check_qkv(query, key, value)
    check_rank("query", query, "(B, H, L, D)", rank=4)  # key and value: query's rank (check_qkv)
    B, H, _, D = query.shape
    if key.shape[0] != B or value.shape[-1] != D:
        raise ValueError(
            f"key/value: expected shape (B, G, S, D) with B = {B}, G dividing H = {H} "
            f"and D = {D}, got {shape_str(key)} and {shape_str(value)}"
        )
    check_kv_heads(
        "key/value",
        H,
        key.shape[1],
        of=f"the query heads H = {H} (shape (B, G, S, D))",
        got=f"{shape_str(key)} and {shape_str(value)}",
    )


def _check_saved(query, out, lse, d_out) -> None:
    """The kernels index ``lse`` as (B, H, L) float32 and ``out``/``d_out`` as (B, H, L, D) of
    query's dtype and device: anything else would be read out of bounds, not refused."""
    want = tuple(query.shape)
    check_shape("out", out, want, "(B, H, L, D)")
    check_shape("d_out", d_out, want, "(B, H, L, D)")
    check_shape("lse", lse, want[:3], "(B, H, L)")
    if lse.dtype != torch.float32:
        raise ValueError(f"lse: expected float32 (as triton_forward returns it), got {lse.dtype}")
    for name, t in (("out", out), ("d_out", d_out), ("lse", lse)):
        if t.device != query.device:
            raise ValueError(f"{name}: expected query's device {query.device}, got {t.device}")
    for name, t in (("out", out), ("d_out", d_out)):
        if t.dtype != query.dtype:
            raise ValueError(f"{name}: expected query's dtype {query.dtype}, got {t.dtype}")

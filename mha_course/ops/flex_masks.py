"""Chapter 18: FlexAttention — every mask as a function of (batch, head, query index, key index).

``torch.nn.attention.flex_attention`` takes two kinds of function:

* a ``mask_mod(b, h, q_idx, kv_idx) -> bool``: may query ``q_idx`` attend to key ``kv_idx``?
  ``create_block_mask`` evaluates it once per block of (by default 128 x 128) positions and
  records which blocks are empty (skipped), full (no mask needed) or partial (masked inside);
* a ``score_mod(score, b, h, q_idx, kv_idx) -> score``: changes one score before the softmax
  (a bias such as ALiBi, a soft cap, ...).

The functions here are the masks of earlier chapters in that form. Called without
``torch.compile`` (as here, on CPU), flex_attention runs an unfused reference that materialises
the scores — the same numbers; the fused kernel comes from ``torch.compile`` (Triton on a GPU,
C++ on a CPU, which needs a C++ compiler).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable

import torch

from mha_course._checks import (
    check_nonnegative_int,
    check_positive_int,
    check_qkv,
    check_rank,
    check_tensor,
    shape_str,
)

MaskMod = Callable[..., torch.Tensor]
ScoreMod = Callable[..., torch.Tensor]


def causal(b, h, q_idx, kv_idx):
    """Query ``i`` sees keys ``j <= i`` (top-left aligned, as SDPA's ``is_causal``)."""
    return q_idx >= kv_idx


def sliding_window(window: int) -> MaskMod:
    """Causal, and only the last ``window`` keys: ``i - window < j <= i`` (itself included)."""
    check_positive_int("window", window, "W (keys per query)")

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask_mod


def prefix_lm(prefix_len: int) -> MaskMod:
    """Prefix-LM: the first ``prefix_len`` positions see each other both ways; the rest is causal."""
    check_nonnegative_int("prefix_len", prefix_len, "(positions that see each other both ways)")

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_len) | (q_idx >= kv_idx)

    return mask_mod


def document_causal(doc_ids: torch.Tensor) -> MaskMod:
    """Packed sequences: causal, and only within one's own document (``doc_ids[i] == doc_ids[j]``).

    Shape:
        doc_ids: (T,) integer document number of each position of the packed sequence.
    """
    check_tensor("doc_ids", doc_ids)
    if (
        doc_ids.dim() != 1
        or doc_ids.is_floating_point()
        or doc_ids.is_complex()
        or doc_ids.dtype == torch.bool
    ):
        raise ValueError(
            f"doc_ids: expected an integer tensor of shape (T,), got "
            f"{shape_str(doc_ids)} {doc_ids.dtype}"
        )

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod


def alibi(slopes: torch.Tensor) -> ScoreMod:
    """ALiBi as a ``score_mod``: ``score - slopes[h] * |i - j|`` (chapter 12's bias).

    Shape:
        slopes: (H,) one slope per query head.
    """
    check_tensor("slopes", slopes)
    if slopes.dim() != 1 or not slopes.is_floating_point():
        raise ValueError(
            f"slopes: expected a floating-point tensor of shape (H,), got "
            f"{shape_str(slopes)} {slopes.dtype}"
        )

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    return score_mod


def block_counts(block_mask) -> dict[str, int]:
    """How many (query block, key block) tiles a BlockMask computes with a mask (``partial``),
    without one (``full``), and skips (``skipped``), summed over its batch and heads."""
    if not hasattr(block_mask, "kv_num_blocks"):
        raise ValueError(
            f"block_mask: expected a BlockMask from create_block_mask, got "
            f"{type(block_mask).__name__}"
        )
    n_q, n_kv = block_mask.kv_num_blocks.shape[-1], block_mask.q_num_blocks.shape[-1]
    partial = int(block_mask.kv_num_blocks.sum())
    full = 0 if block_mask.full_kv_num_blocks is None else int(block_mask.full_kv_num_blocks.sum())
    total = n_q * n_kv * block_mask.kv_num_blocks[..., 0].numel()
    return {"partial": partial, "full": full, "skipped": total - partial - full, "total": total}


def flex_attention(
    query,
    key,
    value,
    score_mod: ScoreMod | None = None,
    block_mask=None,
    scale: float | None = None,
    compiled: bool = False,
) -> torch.Tensor:
    """torch's ``flex_attention``; eager (unfused, its warning silenced) unless ``compiled``.

    ``compiled=True`` wraps it in ``torch.compile`` (on CPU that generates C++ and needs a C++
    compiler: :func:`compiler_available`).

    Shape:
        query: (B, H, L, D); key, value: (B, H, S, D). Returns (B, H, L, D).
    """
    from torch.nn.attention.flex_attention import flex_attention as torch_flex

    _check_flex_inputs(query, key, value)
    if compiled:
        return _compiled(torch_flex)(
            query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return torch_flex(
            query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale
        )


def _check_flex_inputs(query, key, value) -> None:
    """(B, H, L, D) queries; (B, H, S, D) keys and values (same B and H: no GQA here)."""
    check_qkv(query, key, value)
    check_rank("query", query, "(B, H, L, D)", rank=4)
    if key.shape[:2] != query.shape[:2]:
        raise ValueError(
            f"key: expected shape (B, H, S, D) with (B, H) = {tuple(query.shape[:2])} "
            f"as query's, got {shape_str(key)}"
        )


_COMPILED: dict = {}


def _compiled(fn):
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn)
    return _COMPILED[fn]


def compiler_available() -> bool:
    """Whether ``torch.compile`` can build CPU kernels here (a C++ compiler on the PATH)."""
    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))

"""Chapter 1: attention as a soft dictionary lookup, in plain NumPy."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax: subtract the row maximum before ``exp``.

    The NumPy one (chapter 1); the torch one, which also gives 0 on fully masked rows, is
    :func:`mha_course.ops.sdpa.stable_softmax` (NumPy arrays here, tensors there: two functions).

    ``exp(x - m) / sum(exp(x - m))`` equals ``exp(x) / sum(exp(x))`` for any ``m``;
    choosing ``m = max(x)`` makes every exponent ``<= 0`` so nothing overflows.

    Shape:
        x: any shape; the softmax runs along ``axis``. Output: same shape.
    """
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def dot_product_attention(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Single-head attention in NumPy: scores = q·k, weights = softmax(scores), out = weights @ V.

    ``scale`` multiplies the scores (chapter 2 sets it to 1/sqrt(d_k)); ``None`` means 1.

    Shape:
        query: (L, D) or (D,) for one query; keys: (S, D); values: (S, Dv).
        Returns (output, weights): (L, Dv) and (L, S)  — or (Dv,) and (S,) for one query.
    """
    q = np.asarray(query, dtype=float)
    k = np.asarray(keys, dtype=float)
    v = np.asarray(values, dtype=float)
    if k.ndim != 2:
        raise ValueError(f"keys: expected shape (S, D), got {k.shape}")
    if v.ndim != 2 or v.shape[0] != k.shape[0]:
        raise ValueError(f"values: expected shape (S, Dv) with S = {k.shape[0]}, got {v.shape}")
    if q.ndim not in (1, 2) or q.shape[-1] != k.shape[1]:
        raise ValueError(
            f"query: expected shape (L, D) or (D,) with D = {k.shape[1]}, got {q.shape}"
        )
    scores = q @ k.T  # (L, D) @ (D, S) -> (L, S)
    if scale is not None:
        scores = scores * scale
    weights = softmax(scores, axis=-1)
    return weights @ v, weights  # (L, S) @ (S, Dv) -> (L, Dv)

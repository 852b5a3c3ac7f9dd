"""The course's own versions of the earlier tasks a later task calls, for grading a later item
on its own (issue #31 item 5: a wrong earlier task costs only its own points).

When an earlier item fails, the grader grades a later item that calls it again with the learner's
earlier function replaced by the one here (the chapter's ``Item.substitutes`` says which may be).
They live in the sandbox's folder (``child/``) because the learner's later function calls them
there; the engine stubs EVERY function of this module out of every unit (source level, like a
forbidden name) except, in such a second run, the ones that item may use. So no learner code can
call one to pass the earlier task itself, nor reach another item's answer through it.

Plain code over what the learner's function passes in: no course import (a stubbed course
function must not be reached through these), no torch import (ex01's NumPy child stays light).
Chapters 1-4 here; the torch exercises' (chapters 5-19) in :mod:`substitutes_torch`. Each is
self-contained: in a second run the other defs of its module may be stubbed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """ex01 task 1: a softmax over the last axis that never overflows.

    Shape:
        x: (..., S). Returns (..., S).
    """
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def dot_scores(query: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """ex01 task 2: ``scores[i, j] = query[i] · keys[j]``.

    Shape:
        query: (L, D), keys: (S, D). Returns (L, S).
    """
    return query @ keys.T  # (L, D) @ (D, S) -> (L, S)


def scaled_scores(query: Any, key: Any) -> Any:
    """ex02 task 1: ``query @ keyᵀ / sqrt(D)`` (tensors or arrays).

    Shape:
        query: (..., L, D), key: (..., S, D). Returns (..., L, S).
    """
    return query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., L, D) @ (..., D, S)


def project_qkv(x: Any, W_Q: Any, W_K: Any, W_V: Any) -> tuple[Any, Any, Any]:
    """ex03 task 1: queries, keys and values of a sequence (the solution's head does not call
    it; a learner's often does).

    Shape:
        x: (B, T, E); W_Q, W_K, W_V: (E, D). Returns (q, k, v), each (B, T, D).
    """
    return x @ W_Q, x @ W_K, x @ W_V  # (B, T, E) @ (E, D) -> (B, T, D) each


def split_heads(x: Any, num_heads: int) -> Any:
    """ex04 task 1: cut the last dimension into heads, heads before the sequence.

    Shape:
        x: (B, T, H * D). Returns (B, H, T, D).
    """
    B, T, E = x.shape
    return x.reshape(B, T, num_heads, E // num_heads).transpose(1, 2)  # (B, T, E) -> (B, H, T, D)


def merge_heads(x: Any) -> Any:
    """ex04 task 2: the inverse of :func:`split_heads`.

    Shape:
        x: (B, H, T, D). Returns (B, T, H * D).
    """
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, E)

"""A preallocated KV cache: write new keys/values into a fixed buffer instead of concatenating.

:class:`mha_course.KVCache` (chapter 5) grows with ``torch.cat``: every decode step allocates a
new (B, G, S + 1, D) tensor and copies all S old positions into it — O(S) work and a fresh
allocation per token, O(S²) copying over a whole generation. Production caches (vLLM, Hugging
Face's ``StaticCache``) allocate ``max_len`` positions once and write each new position in
place; a step then touches only the new position, and the memory never moves.

Follows :class:`mha_course.caches.base.Cache` like :class:`~mha_course.KVCache`, so it can be passed as
``kv_cache=`` to :class:`~mha_course.MultiHeadAttention`; ``nbytes`` counts the filled positions,
``allocated_bytes`` the whole buffers.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_positive_int
from mha_course.caches.base import Cache, check_new_kv, kv_signature

# A view is a Python object: making one costs about a microsecond, as much as copying a decode
# step's new key, and each is ~0.7 kB. A one-position write into a new slice (the view, then
# the copy) and two views of the filled part measured 9.6 us per update against 4.8 us for
# KVCache's two small ``torch.cat`` (B1 G4 D32, 16-64 positions, one thread); with the views
# made once per position and kept, 2.9 us. They are kept for the first VIEWS_KEPT positions
# (at most ~0.7 MB per cache); past them a step's attention over that many keys outweighs them.
VIEWS_KEPT = 256


class StaticKVCache(Cache):
    """Keys/values of up to ``max_len`` positions in buffers allocated once.

    The buffers are created on the first ``update`` (so B, G, D, dtype and device come from
    the keys); ``update`` returns views of the filled part, no copy of the old positions.

    Shape:
        buffers key: (B, G, max_len, D), value: (B, G, max_len, Dv); views (B, G, S, D).
    """

    def __init__(self, max_len: int) -> None:
        self.max_len = check_positive_int("max_len", max_len, " (positions the buffers hold)")
        self._key: torch.Tensor | None = None
        self._value: torch.Tensor | None = None
        self._length = 0
        self._verified: tuple | None = None  # the signature of the last checked call
        self._slots: list = []  # [p]: (key, value) views of position p, made on first use
        self._filled: list = []  # [n]: (key, value) views of positions [0, n), likewise

    @property
    def length(self) -> int:
        """Number of filled positions S."""
        return self._length

    def held(self) -> tuple[torch.Tensor, ...]:
        """Views of the filled part, (B, G, S, D) and (B, G, S, Dv)."""
        if self._key is None or not self._length:
            return ()
        return self._key[:, :, : self._length], self._value[:, :, : self._length]

    def allocated(self) -> tuple[torch.Tensor, ...]:
        """The whole buffers, (B, G, max_len, D) and (B, G, max_len, Dv)."""
        return () if self._key is None else (self._key, self._value)

    def reset(self) -> None:
        """Start a new sequence (the buffers are kept and overwritten)."""
        self._length = 0

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this call's keys/values at positions ``[S_old, S_old + S_new)``; return all.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv).
            Returns views key (B, G, S_old + S_new, D), value (B, G, S_old + S_new, Dv).
        """
        sig = kv_signature(key, value)
        # a decode step like the last one, into the same buffers: the same verdict, not rechecked
        if not self._length or sig is None or sig != self._verified:
            # the buffers have the held views' sizes but S: checking against them makes no views
            check_new_kv(key, value, (self._key, self._value) if self._length else None)
            self._verified = sig if self._length else None
        B, G, S_new, D = key.shape
        end = self._length + S_new
        if end > self.max_len:  # checked before anything is (re)allocated or written
            raise ValueError(
                f"key: the cache holds max_len = {self.max_len} positions; "
                f"{self._length} cached + {S_new} new does not fit"
            )
        k_buf, v_buf = self._key, self._value
        if not self._length and (
            k_buf is None
            or (*k_buf.shape[:2], k_buf.shape[3], v_buf.shape[3], k_buf.dtype, k_buf.device)
            != (B, G, D, value.shape[3], key.dtype, key.device)
        ):  # a new sequence of another shape gets new buffers
            k_buf = self._key = key.new_empty(B, G, self.max_len, D)  # allocated once
            v_buf = self._value = value.new_empty(B, G, self.max_len, value.shape[-1])
            kept = min(self.max_len, VIEWS_KEPT)
            self._slots, self._filled = [None] * kept, [None] * (kept + 1)
        start = self._length
        # kept views are made and used only without autograd (decoding under no_grad): torch
        # forbids an in-place write, with gradients on, into a view made under no_grad
        kept = not torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        # in place: only the new positions are written
        if kept and S_new == 1 and start < VIEWS_KEPT:  # a decode step: its position's views
            slot = self._slots[start]
            if slot is None:
                slot = self._slots[start] = (k_buf.narrow(2, start, 1), v_buf.narrow(2, start, 1))
            slot[0].copy_(key)
            slot[1].copy_(value)
        else:
            k_buf[:, :, start:end] = key
            v_buf[:, :, start:end] = value
        self._length = end
        if not kept or end > VIEWS_KEPT:
            return k_buf.narrow(2, 0, end), v_buf.narrow(2, 0, end)  # views, (B, G, S, D)
        filled = self._filled[end]
        if filled is None:
            filled = self._filled[end] = (k_buf.narrow(2, 0, end), v_buf.narrow(2, 0, end))
        return filled  # views of the filled part, (B, G, S, D) and (B, G, S, Dv)

"""A preallocated KV cache: write new keys/values into a fixed buffer instead of concatenating.

:class:`mha_course.KVCache` (chapter 5) grows with ``torch.cat``: every decode step allocates a
new (B, G, S + 1, D) tensor and copies all S old positions into it — O(S) work and a fresh
allocation per token, O(S²) copying over a whole generation. Production caches (vLLM, Hugging
Face's ``StaticCache``) allocate ``max_len`` positions once and write each new position in
place; a step then touches only the new position, and the memory never moves.

Same interface as :class:`~mha_course.KVCache` (``update``, ``length``, ``reset``, ``nbytes``),
so it can be passed as ``kv_cache=`` to :class:`~mha_course.MultiHeadAttention`.
"""

from __future__ import annotations

import torch

from ._checks import check_rank, check_tensor, shape_str


class StaticKVCache:
    """Keys/values of up to ``max_len`` positions in buffers allocated once.

    The buffers are created on the first ``update`` (so B, G, D, dtype and device come from
    the keys); ``update`` returns views of the filled part, no copy of the old positions.

    Shape:
        buffers key: (B, G, max_len, D), value: (B, G, max_len, Dv); views (B, G, S, D).
    """

    def __init__(self, max_len: int) -> None:
        if max_len <= 0:
            raise ValueError(f"max_len: expected a positive int, got {max_len}")
        self.max_len = max_len
        self._key: torch.Tensor | None = None
        self._value: torch.Tensor | None = None
        self._length = 0

    def __len__(self) -> int:
        return self._length

    @property
    def length(self) -> int:
        """Number of filled positions S."""
        return self._length

    @property
    def nbytes(self) -> int:
        """Bytes of the filled part (the buffers themselves hold ``max_len`` positions)."""
        if self._key is None:
            return 0
        per_pos = (self._key[:, :, :1].numel() * self._key.element_size()
                   + self._value[:, :, :1].numel() * self._value.element_size())
        return per_pos * self._length

    def reset(self) -> None:
        """Start a new sequence (the buffers are kept and overwritten)."""
        self._length = 0

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this call's keys/values at positions ``[S_old, S_old + S_new)``; return all.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv).
            Returns views key (B, G, S_old + S_new, D), value (B, G, S_old + S_new, Dv).
        """
        check_tensor("key", key)
        check_tensor("value", value)
        check_rank("key", key, "(B, G, S, D)", rank=4)
        check_rank("value", value, "(B, G, S, Dv)", rank=4)
        B, G, S_new, D = key.shape
        if self._key is None or self._key.shape[:2] != (B, G) or self._key.shape[3] != D \
                or self._key.dtype != key.dtype or self._key.device != key.device:
            if self._length:
                raise ValueError(f"key: expected shape (B, G, S, D) = {tuple(self._key.shape[:2])}"
                                 f" + (S, {self._key.shape[3]}) to match the cache, got "
                                 f"{shape_str(key)}; call reset() to start a new sequence")
            self._key = key.new_empty(B, G, self.max_len, D)  # allocated once
            self._value = value.new_empty(B, G, self.max_len, value.shape[-1])
        end = self._length + S_new
        if end > self.max_len:
            raise ValueError(f"key: the cache holds max_len = {self.max_len} positions; "
                             f"{self._length} cached + {S_new} new does not fit")
        self._key[:, :, self._length:end] = key  # in place: only the new positions are written
        self._value[:, :, self._length:end] = value
        self._length = end
        return self._key[:, :, :end], self._value[:, :, :end]  # views, (B, G, S, D)

"""Chapter 5: the KV cache for incremental (autoregressive) decoding."""

from __future__ import annotations

import torch

from mha_course.caches.base import Cache, check_new_kv, kv_signature


class KVCache(Cache):
    """Keys and values of every token seen so far, for one attention layer.

    Pass it as ``MultiHeadAttention(...)(x, kv_cache=cache)``: each call appends that call's
    projected keys/values and attends over everything cached. With ``is_causal=True`` the
    causal mask is offset by the cache length, so decoding token by token (or a prompt chunk,
    then tokens) equals one causal forward over the whole sequence. Follows
    :class:`mha_course.caches.base.Cache` (``update``, ``length``, ``nbytes``, ``reset``).

    Shape:
        key: (B, G, S, D), value: (B, G, S, Dv) — G key/value heads, S cached positions.
    """

    def __init__(self) -> None:
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None
        self._verified: tuple | None = None  # (signature, the key it was checked against)

    @property
    def length(self) -> int:
        """Number of cached positions S (0 when empty)."""
        return 0 if self.key is None else self.key.shape[-2]

    def held(self) -> tuple[torch.Tensor, ...]:
        """The cached keys and values (the bytes ``nbytes`` counts)."""
        return () if self.key is None else (self.key, self.value)

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.key = self.value = None
        self._verified = None

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values and return all of them.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv).
            Returns key (B, G, S_old + S_new, D) and value (B, G, S_old + S_new, Dv).
        """
        sig = kv_signature(key, value)
        # a decode step like the last one, onto what that step returned: the same verdict
        seen = self._verified
        if (
            self.key is None
            or sig is None
            or seen is None
            or seen[0] != sig
            or seen[1] is not self.key
            or seen[2] is not self.value
        ):
            check_new_kv(key, value, None if self.key is None else (self.key, self.value))
        if self.key is not None:
            # (B, G, S_old, D) and (B, G, S_new, D) -> (B, G, S_old + S_new, D)
            key = torch.cat([self.key, key], dim=-2)
            value = torch.cat([self.value, value], dim=-2)  # same for values (last size Dv)
        self.key, self.value = key, value
        self._verified = (sig, key, value)
        return key, value

"""Chapter 5: the KV cache for incremental (autoregressive) decoding."""

from __future__ import annotations

import torch

from ._checks import check_rank, shape_str


class KVCache:
    """Keys and values of every token seen so far, for one attention layer.

    Pass it as ``MultiHeadAttention(...)(x, kv_cache=cache)``: each call appends that call's
    projected keys/values and attends over everything cached. With ``is_causal=True`` the
    causal mask is offset by the cache length, so decoding token by token (or a prompt chunk,
    then tokens) equals one causal forward over the whole sequence.

    Shape:
        key, value: (B, G, S, D) — G key/value heads, S cached positions.
    """

    def __init__(self) -> None:
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.length

    @property
    def length(self) -> int:
        """Number of cached positions S (0 when empty)."""
        return 0 if self.key is None else self.key.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        if self.key is None:
            return 0
        return self.key.numel() * self.key.element_size() * 2

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.key = self.value = None

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values and return all of them.

        Shape:
            key, value: (B, G, S_new, D). Returns (B, G, S_old + S_new, D) each.
        """
        check_rank("key", key, "(B, G, S, D)", rank=4)
        check_rank("value", value, "(B, G, S, D)", rank=4)
        if self.key is not None:
            old, new = self.key.shape, key.shape
            if (old[0], old[1], old[3]) != (new[0], new[1], new[3]):
                raise ValueError(
                    f"key: expected shape (B, G, S, D) = ({old[0]}, {old[1]}, S, {old[3]}) to match "
                    f"the cache, got {shape_str(key)}; call reset() to start a new sequence"
                )
            key = torch.cat([self.key, key], dim=-2)  # (B, G, S_old, D) + (B, G, S_new, D)
            value = torch.cat([self.value, value], dim=-2)
        self.key, self.value = key, value
        return key, value

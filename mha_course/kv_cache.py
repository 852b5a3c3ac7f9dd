"""Chapter 5: the KV cache for incremental (autoregressive) decoding."""

from __future__ import annotations

import torch

from ._checks import check_rank, check_tensor, shape_str


class KVCache:
    """Keys and values of every token seen so far, for one attention layer.

    Pass it as ``MultiHeadAttention(...)(x, kv_cache=cache)``: each call appends that call's
    projected keys/values and attends over everything cached. With ``is_causal=True`` the
    causal mask is offset by the cache length, so decoding token by token (or a prompt chunk,
    then tokens) equals one causal forward over the whole sequence.

    Shape:
        key: (B, G, S, D), value: (B, G, S, Dv) — G key/value heads, S cached positions.
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
        return sum(t.numel() * t.element_size() for t in (self.key, self.value))

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.key = self.value = None

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values and return all of them.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv).
            Returns key (B, G, S_old + S_new, D) and value (B, G, S_old + S_new, Dv).
        """
        check_tensor("key", key)
        check_tensor("value", value)
        check_rank("key", key, "(B, G, S, D)", rank=4)
        check_rank("value", value, "(B, G, S, Dv)", rank=4)
        if value.shape[:3] != key.shape[:3]:
            raise ValueError(
                f"value: expected shape (B, G, S, Dv) = ({key.shape[0]}, {key.shape[1]}, "
                f"{key.shape[2]}, Dv) like key's, got {shape_str(value)}"
            )
        if self.key is not None:
            for name, d, new, old in (("key", "D", key, self.key), ("value", "Dv", value, self.value)):
                if (new.shape[:2], new.shape[3]) != (old.shape[:2], old.shape[3]):
                    raise ValueError(
                        f"{name}: expected shape (B, G, S, {d}) = ({old.shape[0]}, {old.shape[1]}, "
                        f"S, {old.shape[3]}) to match the cache, got {shape_str(new)}; "
                        f"call reset() to start a new sequence"
                    )
                if new.dtype != old.dtype:
                    raise ValueError(
                        f"{name}: expected dtype {old.dtype} to match the cache, got {new.dtype}"
                    )
            # (B, G, S_old, D) and (B, G, S_new, D) -> (B, G, S_old + S_new, D)
            key = torch.cat([self.key, key], dim=-2)
            value = torch.cat([self.value, value], dim=-2)  # same for values (last size Dv)
        self.key, self.value = key, value
        return key, value

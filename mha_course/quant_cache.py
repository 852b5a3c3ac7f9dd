"""Chapter 16 (1/2): less waste per byte — a KV cache stored in int8 (or 4-bit) with scales.

Symmetric absmax quantization: ``q = round(x / s)`` with ``s = max|x| / q_max`` over a group
of values, ``x ≈ q · s``. The group decides what one scale covers: **per token** (the D
features of one key/value head at one position share a scale; the cache can grow a token at a
time) or **per channel** (one feature across all S positions shares a scale; good for keys,
whose outliers sit in fixed channels — KIVI quantizes keys per channel, values per token).
"""

from __future__ import annotations

import torch

from ._checks import check_rank, check_tensor, shape_str
from .gqa import kv_cache_bytes

AXES = {"token": -1, "channel": -2}  # which dimension one scale reduces over
BITS = (8, 4)


def _check(axis: str, bits: int) -> None:
    if axis not in AXES:
        raise ValueError(f"axis: expected 'token' (one scale per (B, G, S)) or 'channel' "
                         f"(one per (B, G, D)), got {axis!r}")
    if bits not in BITS:
        raise ValueError(f"bits: expected one of {BITS}, got {bits!r}")


def quantize(x: torch.Tensor, axis: str = "token", bits: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax quantization to int8 values in ``[-q_max, q_max]``
    (``q_max = 2^(bits-1) - 1``: 127 for int8, 7 for 4-bit).

    Shape:
        x: (B, G, S, D). Returns q (B, G, S, D) int8 and scale (B, G, S, 1) for
        ``axis="token"`` or (B, G, 1, D) for ``axis="channel"``, in x's dtype.
    """
    check_tensor("x", x)
    check_rank("x", x, "(B, G, S, D)", rank=4)
    _check(axis, bits)
    q_max = 2 ** (bits - 1) - 1
    amax = x.abs().amax(dim=AXES[axis], keepdim=True)  # (B, G, S, 1) or (B, G, 1, D)
    scale = torch.where(amax > 0, amax / q_max, torch.ones_like(amax))  # all-zero group: any scale
    q = torch.round(x / scale).clamp(-q_max, q_max).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``q · scale`` in the scale's dtype.

    Shape:
        q: (B, G, S, D); scale broadcastable to it ((B, G, S, 1) or (B, G, 1, D)).
    """
    return q.to(scale.dtype) * scale


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two 4-bit values per byte (low nibble = even feature).

    Shape:
        q: (..., D) int8 in [-8, 7], D even. Returns (..., D / 2) uint8.
    """
    if q.shape[-1] % 2:
        raise ValueError(f"q: expected shape (..., D) with D even to pack pairs, got {shape_str(q)}")
    u = (q.to(torch.int16) & 0xF).to(torch.uint8)  # two's complement nibbles
    return u[..., 0::2] | (u[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`.

    Shape:
        packed: (..., D / 2) uint8. Returns (..., D) int8.
    """
    lo, hi = (packed & 0xF).to(torch.int8), (packed >> 4).to(torch.int8)
    lo, hi = torch.where(lo > 7, lo - 16, lo), torch.where(hi > 7, hi - 16, hi)
    return torch.stack([lo, hi], dim=-1).flatten(-2)  # (..., D/2, 2) -> (..., D)


def quantized_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, seq_len: int = 1,
                          batch: int = 1, bits: int = 8,
                          scale_dtype: torch.dtype = torch.float16) -> int:
    """Bytes of a per-token quantized cache: the values at ``bits`` each (chapter 7's
    :func:`mha_course.kv_cache_bytes` at int8, times bits / 8) plus one scale per token, key/value
    head and layer for keys and for values (``2 · G`` scales per token per layer).

    Shape:
        Per layer: q (B, G, S, D) for keys and values, scales (B, G, S, 1). Returns an int.
    """
    _check("token", bits)
    values = kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch, torch.int8) * bits // 8
    scales = kv_cache_bytes(num_layers, num_kv_heads, 1, seq_len, batch, scale_dtype)
    return values + scales


class QuantizedKVCache:
    """A KV cache holding per-token quantized keys and values (int8, or 4-bit packed two per
    byte) and their scales; ``update`` returns the dequantized keys/values in the input dtype,
    so it works as ``MultiHeadAttention(...)(x, kv_cache=cache)``.

    Shape:
        q_key, q_value: (B, G, S, D) int8 or (B, G, S, D / 2) uint8; scales (B, G, S, 1).
    """

    def __init__(self, bits: int = 8, scale_dtype: torch.dtype = torch.float16) -> None:
        _check("token", bits)
        self.bits, self.scale_dtype = bits, scale_dtype
        self.reset()

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.q_key = self.q_value = self.key_scale = self.value_scale = None

    def __len__(self) -> int:
        return self.length

    @property
    def length(self) -> int:
        """Number of cached positions S."""
        return 0 if self.q_key is None else self.q_key.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes of the stored codes and scales."""
        ts = (self.q_key, self.q_value, self.key_scale, self.value_scale)
        return 0 if self.q_key is None else sum(t.numel() * t.element_size() for t in ts)

    def _store(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, scale = quantize(x.double(), "token", self.bits)  # scales from the exact values
        return (pack_int4(q) if self.bits == 4 else q), scale.to(self.scale_dtype)

    def _load(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        q = unpack_int4(q) if self.bits == 4 else q
        return dequantize(q, scale.to(dtype))

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize and append the new keys/values; return all of them dequantized.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv). Returns (B, G, S, D), (B, G, S, Dv).
        """
        check_rank("key", key, "(B, G, S, D)", rank=4)
        check_rank("value", value, "(B, G, S, Dv)", rank=4)
        parts = [*self._store(key), *self._store(value)]
        if self.q_key is not None:
            old = (self.q_key, self.key_scale, self.q_value, self.value_scale)
            if key.shape[:2] != self.q_key.shape[:2]:
                raise ValueError(f"key: expected shape (B, G, S, D) with (B, G) = "
                                 f"{tuple(self.q_key.shape[:2])} to match the cache, got {shape_str(key)}")
            parts = [torch.cat([o, n], dim=-2) for o, n in zip(old, parts)]  # (B, G, S_old + S_new, ...)
        self.q_key, self.key_scale, self.q_value, self.value_scale = parts
        return (self._load(self.q_key, self.key_scale, key.dtype),
                self._load(self.q_value, self.value_scale, value.dtype))

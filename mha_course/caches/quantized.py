"""Chapter 16 (1/2): less waste per byte — a KV cache stored in int8 (or 4-bit) with scales.

Symmetric absmax quantization: ``q = round(x / s)`` with ``s = max|x| / q_max`` over a group
of values, ``x ≈ q · s``. The group decides what one scale covers: **per token** (the D
features of one key/value head at one position share a scale; the cache can grow a token at a
time) or **per channel** (one feature across all S positions shares a scale; KIVI quantizes keys
per channel because the keys of large models have outlier channels — chapter 16 measures that
chapter 13's models have none, and there per-token int4 keys lose less). The schemes engines use
(asymmetric, grouped, FP8) are in :mod:`mha_course.caches.quant_schemes`.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_rank, check_tensor, shape_str
from mha_course.caches.base import Cache, check_new_kv, kv_cache_bytes
from mha_course.caches.per_head import attention_by_head, pairs_per_slice

AXES = {"token": -1, "channel": -2}  # which dimension one scale reduces over
BITS = (8, 4)


def _check(axis: str, bits: int) -> None:
    if axis not in AXES:
        raise ValueError(
            f"axis: expected 'token' (one scale per (B, G, S)) or 'channel' "
            f"(one per (B, G, D)), got {axis!r}"
        )
    if bits not in BITS:
        raise ValueError(f"bits: expected one of {BITS}, got {bits!r}")


def quantize(
    x: torch.Tensor, axis: str = "token", bits: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
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
    check_tensor("q", q)
    check_tensor("scale", scale)
    if scale.dim() != q.dim() or any(
        s not in (1, n) for s, n in zip(scale.shape, q.shape, strict=True)
    ):
        raise ValueError(
            f"scale: expected a shape that broadcasts to q's {shape_str(q)} without "
            f"growing it, (B, G, S, 1) or (B, G, 1, D), got {shape_str(scale)}"
        )
    return torch.mul(
        q, scale
    )  # int8 x float -> the scale's dtype in one vectorised step (no int->float copy)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two 4-bit values per byte (low nibble = even feature).

    Shape:
        q: (..., D) int8 in [-8, 7], D even. Returns (..., D / 2) uint8.
    """
    check_tensor("q", q)
    if q.dtype != torch.int8:
        raise ValueError(f"q: expected int8 codes in [-8, 7], got dtype {q.dtype}")
    if q.dim() == 0 or q.shape[-1] % 2:
        raise ValueError(
            f"q: expected shape (..., D) with D even to pack pairs, got {shape_str(q)}"
        )
    if q.numel() and not -8 <= int(q.min()) <= int(q.max()) <= 7:
        raise ValueError(
            f"q: expected 4-bit codes in [-8, 7] (a nibble each), got values in "
            f"[{int(q.min())}, {int(q.max())}]"
        )
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


def quantized_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int = 1,
    batch: int = 1,
    bits: int = 8,
    scale_dtype: torch.dtype = torch.float16,
) -> int:
    """Bytes of a per-token quantized cache: the values at ``bits`` each (chapter 7's
    :func:`mha_course.kv_cache_bytes` at int8, times bits / 8) plus one scale per token, key/value
    head and layer for keys and for values (``2 · G`` scales per token per layer).

    Shape:
        Per layer: q (B, G, S, D) for keys and values, scales (B, G, S, 1). Returns an int.
    """
    _check("token", bits)
    values = (
        kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch, torch.int8) * bits // 8
    )
    scales = kv_cache_bytes(num_layers, num_kv_heads, 1, seq_len, batch, scale_dtype)
    return values + scales


class QuantizedKVCache(Cache):
    """A KV cache holding per-token quantized keys and values (int8, or 4-bit packed two per
    byte) and their scales; ``update`` returns the dequantized keys/values in the input dtype,
    so it works as ``MultiHeadAttention(...)(x, kv_cache=cache)``. Each token is quantized with
    the scale the cache STORES (rounded to ``scale_dtype`` first), so a decoded value is off by at
    most half a step of that stored scale. Follows :class:`mha_course.caches.base.Cache`.

    Where dequantization happens: ``update`` returns what attention reads, as every cache's
    ``update`` does — here the whole cache dequantized to the input dtype, made afresh each call
    (the MHA path: ``MultiHeadAttention(...)(x, kv_cache=cache)``). :meth:`attend` is the fast
    decode path: on a CPU it never makes those floats for the whole cache, only a slice of
    (sequence, head) pairs at a time, each slice's codes turned to floats in one op (on a GPU,
    one slice), the scales applied to the scores and the weights.

    Shape:
        q_key, q_value: (B, G, S, D) int8 or (B, G, S, D / 2) uint8; scales (B, G, S, 1).
    """

    def __init__(self, bits: int = 8, scale_dtype: torch.dtype = torch.float16) -> None:
        _check("token", bits)
        if not isinstance(scale_dtype, torch.dtype) or not scale_dtype.is_floating_point:
            raise ValueError(
                f"scale_dtype: expected a floating-point torch.dtype that can hold a "
                f"scale (torch.float16, torch.bfloat16, torch.float32...), got {scale_dtype!r}"
            )
        self.bits, self.scale_dtype = bits, scale_dtype
        self.reset()

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.q_key = self.q_value = self.key_scale = self.value_scale = None

    @property
    def length(self) -> int:
        """Number of cached positions S."""
        return 0 if self.q_key is None else self.q_key.shape[-2]

    def held(self) -> tuple[torch.Tensor, ...]:
        """The codes and scales: (B, G, S, D or D / 2) twice, (B, G, S, 1) twice."""
        return (
            ()
            if self.q_key is None
            else (self.q_key, self.q_value, self.key_scale, self.value_scale)
        )

    def _store(self, name: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Codes and the stored scale of each token, the codes computed WITH that stored scale.

        Shape:
            x: (B, G, S, D). Returns codes (B, G, S, D) int8 or (B, G, S, D / 2) uint8, scale (B, G, S, 1).
        """
        q_max = 2 ** (self.bits - 1) - 1
        amax = x.double().abs().amax(dim=-1, keepdim=True)  # (B, G, S, 1), exact
        scale = (amax / q_max).to(self.scale_dtype)  # what the cache keeps
        info = torch.finfo(self.scale_dtype)
        if not torch.isfinite(scale).all():
            raise ValueError(
                f"{name}: a token's scale max|x| / {q_max} = {float((amax / q_max).max()):.3g} "
                f"overflows scale_dtype {self.scale_dtype} (largest {info.max:.3g})"
            )
        # a scale rounded DOWN would push max|x| / scale past q_max and clamp it (far past half a step
        # where scale_dtype is subnormal, e.g. fp16 below 6.1e-5): round up to the next representable one
        scale = torch.where(
            scale.double() < amax / q_max,
            torch.nextafter(scale, torch.full_like(scale, info.max)),
            scale,
        )
        tiny = (
            info.smallest_normal * info.eps
        )  # the smallest positive value (subnormal) of scale_dtype
        scale = torch.where(amax == 0, torch.ones_like(scale), scale.clamp_min(tiny))  # never 0
        q = torch.round(x.double() / scale.double()).clamp(-q_max, q_max).to(torch.int8)
        return (pack_int4(q) if self.bits == 4 else q), scale

    def _load(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        q = unpack_int4(q) if self.bits == 4 else q
        return dequantize(q, scale.to(dtype))

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize and append the new keys/values; return all of them dequantized.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv). Returns (B, G, S, D), (B, G, S, Dv).
        """
        check_new_kv(key, value, None)
        for name, x, d in (("key", key, "D"), ("value", value, "Dv")):
            if self.bits == 4 and x.shape[-1] % 2:
                raise ValueError(
                    f"{name}: expected shape (B, G, S, {d}) with {d} even (4-bit codes are "
                    f"packed in pairs), got {shape_str(x)}"
                )
            old = self.q_key if name == "key" else self.q_value
            if old is not None:
                width = old.shape[-1] * (2 if self.bits == 4 else 1)
                if (x.shape[:2], x.shape[-1]) != (old.shape[:2], width):
                    raise ValueError(
                        f"{name}: expected shape (B, G, S, {d}) = ({old.shape[0]}, {old.shape[1]}, "
                        f"S, {width}) to match the cache, got {shape_str(x)}; call reset() "
                        f"to start a new sequence"
                    )
        parts = [*self._store("key", key), *self._store("value", value)]
        if self.q_key is not None:
            old = (self.q_key, self.key_scale, self.q_value, self.value_scale)
            parts = [
                torch.cat([o, n], dim=-2) for o, n in zip(old, parts)
            ]  # (B, G, S_old + S_new, ...)
        self.q_key, self.key_scale, self.q_value, self.value_scale = parts
        return (
            self._load(self.q_key, self.key_scale, key.dtype),
            self._load(self.q_value, self.value_scale, value.dtype),
        )

    def attend(self, query: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """Decode-step attention of ``query`` (the newest L tokens, already stored by ``update``)
        to every cached token, a slice of (sequence, key/value head) pairs at a time
        (:func:`mha_course.caches.per_head.attention_by_head`: each slice's codes turned to floats
        in one vectorised op, the scales applied to the scores and the weights; on a CPU a few MiB
        that stay in the core's cache, on a GPU the whole cache at once) instead of dequantizing the whole cache into memory first: the fast path
        of ``benchmarks/kv_cache_decode.py``. Equals causal attention over ``update``'s
        dequantized keys/values, the queries at the last L positions. (Beside the lesson,
        :func:`mha_course.caches.int8_products.attend_in_int8` takes both products from the codes.)

        Shape:
            query: (B, H, L, D) with H a multiple of the cache's G. Returns (B, H, L, Dv).
        """
        G, S, codes, scales = self.pairs(query)
        width = 2 if self.bits == 4 else 1  # features per code byte
        # the floats one pair's keys and values make, and so how many pairs a slice holds
        per_pair = S * (codes[0].shape[-1] + codes[1].shape[-1]) * width * query.element_size()
        step = pairs_per_slice(len(codes[0]), per_pair, query.device)
        # one float buffer per slice, reused by every slice (fresh memory is page-faulted in)
        bufs = [query.new_empty(step, S, c.shape[-1] * width) for c in codes]

        def load(i: int, j: int) -> tuple[torch.Tensor, ...]:
            """Pairs i..j-1: codes (n, S, D), (n, S, Dv) as floats; scales (n, S, 1) twice."""
            floats = [
                buf[: j - i].copy_(unpack_int4(c[i:j]) if self.bits == 4 else c[i:j])
                for c, buf in zip(codes, bufs)
            ]  # codes to floats, one vectorised op per slice; the scales go on scores and weights
            return (*floats, scales[0][i:j], scales[1][i:j])

        return attention_by_head(query, load, num_kv_heads=G, scale=scale, slice_pairs=step)

    def pairs(self, query: torch.Tensor) -> tuple[int, int, list[torch.Tensor], list[torch.Tensor]]:
        """The cache as B·G (sequence, key/value head) pairs, for a decode step of ``query``
        (checked against the cache): pair ``p`` is sequence ``p // G``, key/value head ``p % G``.

        Shape:
            query: (B, H, L, D). Returns G, S, the key and value codes (B·G, S, D or D / 2) and
            their scales (B·G, S, 1) in the query's dtype.
        """
        check_tensor("query", query)
        check_rank("query", query, "(B, H, L, D)", rank=4)
        if self.q_key is None:
            raise ValueError("query: the cache is empty; call update() with this step's keys first")
        B, G, S = self.q_key.shape[:3]
        D = self.q_key.shape[-1] * (2 if self.bits == 4 else 1)
        if (
            query.shape[0] != B
            or query.shape[1] % G
            or query.shape[3] != D
            or not 0 < query.shape[2] <= S
        ):
            raise ValueError(
                f"query: expected shape (B, H, L, D) = ({B}, H, L, {D}) with H a multiple "
                f"of G = {G} and 0 < L <= S = {S}, got {shape_str(query)}"
            )
        P = B * G
        # (B, G, S, D or D / 2) -> (B·G, S, ...): pair p = (sequence p // G, key/value head p % G)
        codes = [c.reshape(P, S, -1) for c in (self.q_key, self.q_value)]
        scales = [s.reshape(P, S, 1).to(query.dtype) for s in (self.key_scale, self.value_scale)]
        return G, S, codes, scales

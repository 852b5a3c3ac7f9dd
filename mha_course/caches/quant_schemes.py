"""Chapter 16 (the schemes engines ship): asymmetric grouped quantization, KIVI's cache, FP8 e4m3.

:mod:`mha_course.caches.quantized` teaches *symmetric* absmax codes (``q = round(x / s)``). The schemes
papers and serving engines use differ in three ways, each here in a few lines:

- **asymmetric** (zero-point) codes: ``q = round((x − m) / s)`` in ``[0, 2^b − 1]`` with
  ``m = min x`` and ``s = (max x − min x) / (2^b − 1)``; all ``2^b`` levels cover the group's
  range, not a range symmetric around 0 (:func:`fake_quant_asymmetric`);
- **KIVI** (Liu et al., ICML 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
  Cache"): keys per *channel* in groups of ``group`` tokens, values per *token*, both asymmetric,
  and the most recent tokens kept in full precision — keys until a whole group of ``residual``
  tokens is complete (a per-channel scale needs all the group's tokens), values for the last
  ``residual`` tokens (:class:`KIVICache`);
- **FP8 e4m3** (what vLLM and TensorRT-LLM ship as ``kv_cache_dtype="fp8"``): each number becomes
  a float with 4 exponent and 3 mantissa bits (``torch.float8_e4m3fn``, largest 448) after
  dividing by one scale per tensor or per key/value head (:func:`fake_quant_fp8`).

All three are *simulated* ("fake") quantization: they return the dequantized floats a kernel
would compute with, exactly (codes and scales are formed as a real store would form them; the
scales are kept in float64 here, so only the codes' rounding is measured). Bytes are counted by
:func:`scheme_bytes_per_token`, for what a packed store of the same codes would hold.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_float, check_rank, check_tensor
from mha_course.caches.base import Cache, check_new_kv

FP8_MAX = 448.0  # largest finite torch.float8_e4m3fn


def _check_x(x: torch.Tensor) -> None:
    check_tensor("x", x)
    check_float("x", x)
    check_rank("x", x, "(B, G, S, D)", rank=4)


def fake_quant_asymmetric(
    x: torch.Tensor, axis: str = "token", bits: int = 4, group: int | None = None
) -> torch.Tensor:
    """Asymmetric (min/max, zero-point) quantization to ``bits`` and back.

    ``axis="token"``: one (scale, minimum) per token over its D features; ``axis="channel"``: one
    per feature over each block of ``group`` consecutive tokens (all S tokens when ``group`` is
    None; S must be a multiple of ``group``). A decoded value is within half a step ``s / 2`` of x.

    Shape:
        x: (B, G, S, D). Returns (B, G, S, D) in x's dtype.
    """
    _check_x(x)
    if isinstance(bits, bool) or bits not in (2, 3, 4, 8):
        raise ValueError(f"bits: expected one of (2, 3, 4, 8), got {bits!r}")
    if axis not in ("token", "channel"):
        raise ValueError(f"axis: expected 'token' or 'channel', got {axis!r}")
    B, G, S, D = x.shape
    if axis == "channel":
        g = S if group is None else group
        if isinstance(g, bool) or not isinstance(g, int) or g < 1 or S % g:
            raise ValueError(
                f"group: expected a positive divisor of S = {S} (x is (B, G, S, D)), got {group!r}"
            )
        xg = x.double().reshape(B, G, S // g, g, D)  # (B, G, S, D) -> (B, G, S/g, g, D)
        dim = -2
    else:
        xg, dim = x.double(), -1
    lo, hi = xg.amin(dim, keepdim=True), xg.amax(dim, keepdim=True)
    levels = 2**bits - 1
    scale = torch.where(
        hi > lo, (hi - lo) / levels, torch.ones_like(hi)
    )  # constant group: any scale
    q = torch.round((xg - lo) / scale).clamp(0, levels)
    return (q * scale + lo).reshape(B, G, S, D).to(x.dtype)  # -> (B, G, S, D)


def fake_quant_fp8(x: torch.Tensor, scale_over: str = "tensor") -> torch.Tensor:
    """FP8 e4m3 with one scale ``s = max|x| / 448`` per tensor (``"tensor"``) or per key/value
    head (``"head"``: over its S positions and D features); ``x ≈ fp8(x / s) · s``. e4m3 keeps 3
    mantissa bits: a relative error of at most 2^−4 for normal numbers (absolute near zero).

    Shape:
        x: (B, G, S, D). Returns (B, G, S, D) in x's dtype.
    """
    _check_x(x)
    dims = {"tensor": (0, 1, 2, 3), "head": (2, 3)}
    if scale_over not in dims:
        raise ValueError(f"scale_over: expected 'tensor' or 'head', got {scale_over!r}")
    amax = x.double().abs().amax(dim=dims[scale_over], keepdim=True)  # (1, 1, 1, 1) or (B, G, 1, 1)
    s = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    return ((x.double() / s).to(torch.float8_e4m3fn).double() * s).to(x.dtype)


def scheme_bytes_per_token(head_dim: int, bits: int, scales_per_token: float) -> float:
    """Bytes one key (or value) vector of one head costs: ``head_dim · bits / 8`` for the codes
    plus ``scales_per_token`` fp16 numbers (scales and zero-points) per token.

    Per-token symmetric: 1 number; per-token asymmetric: 2; per-channel in groups of g tokens,
    asymmetric: ``2 · head_dim / g``; FP8 with a per-head or per-tensor scale: about 0.
    """
    return head_dim * bits / 8 + 2 * scales_per_token


class KIVICache(Cache):
    """KIVI's KV cache (simulated): asymmetric ``bits``-bit keys per channel in groups of
    ``group`` tokens and values per token, with a full-precision residual of recent tokens.

    Keys enter a full-precision residual; once it holds ``residual`` tokens (a multiple of
    ``group``) they are quantized per channel, ``group`` tokens per scale, and the residual
    empties: 0 … residual − 1 keys are in full precision at any time. Values: the last
    ``residual`` tokens are full precision, each older one is quantized per token when it leaves.
    Follows :class:`mha_course.caches.base.Cache`.

    Shape:
        update: key (B, G, S_new, D), value (B, G, S_new, Dv) -> (B, G, S, D), (B, G, S, Dv).
    """

    def __init__(self, bits: int = 4, group: int = 16, residual: int = 16) -> None:
        for name, v in (("group", group), ("residual", residual)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if residual % group:
            raise ValueError(f"residual: expected a multiple of group = {group}, got {residual}")
        fake_quant_asymmetric(torch.zeros(1, 1, 1, 1), "token", bits)  # checks bits
        self.bits, self.group, self.residual = bits, group, residual
        self.reset()

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.k_quant = self.k_full = self.v_quant = self.v_full = None

    @property
    def length(self) -> int:
        """Tokens seen so far."""
        return 0 if self.k_full is None else self.k_quant.shape[-2] + self.k_full.shape[-2]

    def held(self) -> tuple[torch.Tensor, ...]:
        """The (simulated) quantized and full-precision parts of keys and values."""
        return () if self.k_full is None else (self.k_quant, self.k_full, self.v_quant, self.v_full)

    @property
    def full_precision_tokens(self) -> tuple[int, int]:
        """How many keys and how many values are held in full precision now."""
        return (0, 0) if self.k_full is None else (self.k_full.shape[-2], self.v_full.shape[-2])

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens, quantize what has left the residual; return all keys/values.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv). Returns (B, G, S, D), (B, G, S, Dv).
        """
        check_new_kv(key, value, None if self.k_full is None else (self.k_full, self.v_full))
        if self.k_full is None:
            self.k_quant, self.v_quant = key[..., :0, :], value[..., :0, :]
            self.k_full, self.v_full = key[..., :0, :], value[..., :0, :]
        k_full = torch.cat([self.k_full, key], dim=-2)  # (B, G, r + S_new, D)
        n = k_full.shape[-2] // self.residual * self.residual  # keys in whole residual blocks
        if n:
            done = fake_quant_asymmetric(k_full[..., :n, :], "channel", self.bits, self.group)
            self.k_quant = torch.cat([self.k_quant, done], dim=-2)
        self.k_full = k_full[..., n:, :]
        v_full = torch.cat([self.v_full, value], dim=-2)
        old = max(v_full.shape[-2] - self.residual, 0)  # values leaving the residual
        if old:
            done = fake_quant_asymmetric(v_full[..., :old, :], "token", self.bits)
            self.v_quant = torch.cat([self.v_quant, done], dim=-2)
        self.v_full = v_full[..., old:, :]
        return (
            torch.cat([self.k_quant, self.k_full], dim=-2),
            torch.cat([self.v_quant, self.v_full], dim=-2),
        )

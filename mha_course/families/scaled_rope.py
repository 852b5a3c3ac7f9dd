"""Chapter 20: RoPE scaling — how long-context checkpoints change chapter 12's rotation speeds.

Chapter 12's RoPE turns feature pair ``i`` at position ``m`` by ``m * theta_i`` with
``theta_i = base^(-2i/D)``. A model trained on ``original_max_positions`` tokens has never seen
the slow pairs turn further than that; the rescalings below change the speeds ``theta_i`` (and
YaRN the size of the rotated vectors) so that longer contexts look familiar:

* ``linear`` (position interpolation): every speed divided by ``factor`` — positions squeezed.
* ``dynamic`` (dynamic NTK): the base grows with the sequence length S once S passes
  ``max_positions``: ``base * (factor * S / max_positions - (factor - 1))^(D / (D - 2))``;
  below it the rotation is chapter 12's.
* ``llama3`` (Llama 3.1–3.3): slow pairs (wavelength above ``original / low_freq_factor``) are
  divided by ``factor``, fast pairs (below ``original / high_freq_factor``) kept, the pairs in
  between interpolated smoothly.
* ``yarn`` (Qwen 2.5's long context, DeepSeek V3): per pair, a ramp between the interpolated
  speed (``theta_i / factor``) and the original one, set by how many turns the pair makes in
  the original context (``beta_fast``, ``beta_slow``), and cos/sin multiplied by an
  ``attention_factor`` (``0.1 ln(factor) + 1``) that sharpens the softmax.

Each is :mod:`transformers`' ``modeling_rope_utils`` formula, computed here in float64 (it
computes in float32); the tests compare them. One difference, by design: ``dynamic`` here is
a function of the call (the largest position it rotates), where ``transformers`` keeps the
largest frequency set it has seen on the module until a sequence shorter than
``max_positions`` resets it; for one model's first pass or generation they are equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mha_course.ops.rope import _positions_for, apply_rope, rotate_pairs

KINDS = ("linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """One rescaling of RoPE's speeds (see the module docstring). ``factor`` None (YaRN only)
    means ``max_positions / original_max_positions``."""

    kind: str
    factor: float | None = 1.0
    max_positions: int = (
        2048  # the config's max_position_embeddings (dynamic, yarn's default factor)
    )
    original_max_positions: int | None = None  # llama3, yarn: the context trained on
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn (DeepSeek: also scales the attention's 1/sqrt(d))
    attention_factor: float | None = None  # yarn: None = from factor (and mscale's)
    truncate: bool = True  # yarn: round the ramp's ends to whole pairs

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if self.factor is not None and (isinstance(self.factor, bool) or not self.factor > 0):
            raise ValueError(f"factor: expected a number > 0, got {self.factor!r}")
        if self.kind in ("llama3", "yarn") and not self.original_max_positions:
            raise ValueError(
                f"original_max_positions: {self.kind} needs the context length "
                f"trained on, got {self.original_max_positions!r}"
            )
        if self.kind != "yarn" and self.factor is None:
            raise ValueError(f"factor: {self.kind} needs a number, got None")


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_factor(s: RopeScaling) -> float:
    return s.factor if s.factor is not None else s.max_positions / s.original_max_positions


def scaled_frequencies(
    scaling: RopeScaling | None, dim: int, base: float, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """The speeds ``theta_i`` of the ``dim / 2`` pairs after ``scaling``, in float64, and the
    factor cos and sin are multiplied by. ``seq_len`` is the sequence length (``dynamic``).

    Shape:
        Returns (dim/2,) float64 and a float.
    """
    i = torch.arange(0, dim, 2, dtype=torch.float64)
    theta = 1.0 / base ** (i / dim)  # (dim/2,): chapter 12's speeds
    if scaling is None:
        return theta, 1.0
    s, kind = scaling, scaling.kind
    if kind == "linear":
        return theta / s.factor, 1.0
    if kind == "dynamic":
        S = max(seq_len or s.max_positions, s.max_positions)
        grown = base * ((s.factor * S / s.max_positions) - (s.factor - 1)) ** (dim / (dim - 2))
        return 1.0 / grown ** (i / dim), 1.0
    if kind == "llama3":
        old = s.original_max_positions
        low_wavelen, high_wavelen = old / s.low_freq_factor, old / s.high_freq_factor
        wavelen = 2 * math.pi / theta
        out = torch.where(wavelen > low_wavelen, theta / s.factor, theta)  # slow pairs: / factor
        smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, (1 - smooth) * out / s.factor + smooth * out, out), 1.0
    # yarn
    factor = _yarn_factor(s)
    if s.attention_factor is not None:
        attention = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        attention = yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim)
    else:
        attention = yarn_mscale(factor)

    def turns_to_pair(turns: float) -> float:  # the pair index that makes ``turns`` turns
        return (
            dim * math.log(s.original_max_positions / (turns * 2 * math.pi)) / (2 * math.log(base))
        )

    low, high = turns_to_pair(s.beta_fast), turns_to_pair(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: the original speed (fast pairs), 0: interpolated (slow pairs)
    return theta / factor * (1 - keep) + theta * keep, float(attention)


def attention_mscale(scaling: RopeScaling | None) -> float:
    """DeepSeek's extra factor on the softmax scale under YaRN: ``mscale(factor, mscale_all_dim)²``
    (1 without ``mscale_all_dim``)."""
    if scaling is None or not scaling.mscale_all_dim:
        return 1.0
    return yarn_mscale(_yarn_factor(scaling), scaling.mscale_all_dim) ** 2


def apply_scaled_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    layout: str,
    base: float,
    scaling: RopeScaling | None,
    seq_len: int | None = None,
) -> torch.Tensor:
    """Chapter 12's :func:`~mha_course.apply_rope` with rescaled speeds (``scaling`` None: it is
    that function). ``seq_len``: the length ``dynamic`` scales to (default: largest position + 1).

    Shape:
        x: (..., L, D); positions: (L,) or (B, L). Returns (..., L, D).
    """
    if scaling is None:
        return apply_rope(x, positions, layout=layout, base=base)
    if seq_len is None:
        seq_len = int(positions.max()) + 1 if positions.numel() else 0
    theta, attention = scaled_frequencies(scaling, x.shape[-1], base, seq_len)
    pos = _positions_for(x, positions).to(torch.float64)
    angles = pos[..., None] * theta.to(x.device)  # (..., L, 1) * (D/2,) -> (..., L, D/2)
    cos, sin = (angles.cos() * attention).to(x.dtype), (angles.sin() * attention).to(x.dtype)
    return rotate_pairs(x, cos, sin, layout)

"""Chapter 12: rotary position embeddings (RoPE, Su et al., 2021).

RoPE rotates each pair of features of a query or key by an angle proportional to its position:
pair ``i`` of a token at position ``m`` turns by ``m * theta_i`` with ``theta_i = base^(-2i/D)``.
A dot product of two rotated vectors then depends on the positions only through ``m - n``.

Two layouts are used in the wild, and mixing them up is a classic bug:

* ``"half"`` (GPT-NeoX, Hugging Face Llama): pair ``i`` is features ``(i, i + D/2)``;
* ``"interleaved"`` (RoFormer, GPT-J, Meta's Llama reference code): pair ``i`` is ``(2i, 2i + 1)``.

They are the same rotation up to a fixed permutation of the features (:func:`rope_permutation`);
:func:`convert_rope_layout` permutes a query/key projection's rows so a model trained with one
layout runs unchanged with the other.
"""

from __future__ import annotations

import torch

from mha_course._checks import (
    check_base,
    check_float,
    check_positive_int,
    check_rank,
    check_tensor,
    shape_str,
)

LAYOUTS = ("half", "interleaved")


def _check_head_dim(head_dim: object) -> int:
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(
            f"head_dim: expected a positive even integer D (RoPE rotates pairs of features), "
            f"got {head_dim!r}"
        )
    return head_dim


def _check_layout(layout: object, name: str = "layout") -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"{name}: expected one of {LAYOUTS}, got {layout!r}")
    return layout  # type: ignore[return-value]


def rope_frequencies(
    head_dim: int, base: float = 10000.0, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The rotation speed of each feature pair, ``theta_i = base^(-2i/D)``, in float64.

    Shape:
        Returns (D/2,).
    """
    D = _check_head_dim(head_dim)
    base = check_base("base", base)
    i = torch.arange(D // 2, dtype=torch.float64, device=device)  # (D/2,)
    return base ** (-2.0 * i / D)


def rope_angles(
    positions: torch.Tensor,
    head_dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the angles ``m * theta_i`` for every position ``m`` and pair ``i``.

    The angles are computed in float64 and returned in ``dtype`` (default float64), so large
    positions do not lose precision before the cast.

    Shape:
        positions: (..., L) integer (or float) positions. Returns cos, sin: (..., L, D/2).
    """
    check_tensor("positions", positions)
    if positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(
            f"positions: expected integer or real positions, got dtype {positions.dtype}"
        )
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(
            f"dtype: expected a floating-point dtype for cos/sin (or None), got {dtype!r}"
        )
    theta = rope_frequencies(head_dim, base, device=positions.device)  # (D/2,)
    angles = positions.to(torch.float64)[..., None] * theta  # (..., L, 1) * (D/2,) -> (..., L, D/2)
    dtype = torch.float64 if dtype is None else dtype
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _positions_for(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Align ``positions`` (L,) or (B, L) with x (..., L, D): (B, L) becomes (B, 1, ..., 1, L)."""
    check_tensor("positions", positions)
    L = x.shape[-2]
    if positions.dim() not in (1, 2) or positions.shape[-1] != L:
        raise ValueError(
            f"positions: expected shape (L,) or (B, L) with L = {L} (x's length, x of shape "
            f"{shape_str(x)}), got {shape_str(positions)}"
        )
    if positions.dim() == 2:
        if x.dim() < 3 or positions.shape[0] not in (1, x.shape[0]):
            raise ValueError(
                f"positions: a (B, L) tensor needs x of shape (B, ..., L, D) with the same B; "
                f"got positions {shape_str(positions)} and x {shape_str(x)}"
            )
        # (B, L) -> (B, 1, ..., 1, L): one row of positions per batch element, shared by heads
        positions = positions.reshape(positions.shape[0], *([1] * (x.dim() - 3)), L)
    return positions


def rotate_pairs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half"
) -> torch.Tensor:
    """Rotate feature pair ``i`` of ``x`` by the angle whose cosine/sine are ``cos[..., i]``,
    ``sin[..., i]``: ``(a, b) -> (a cos - b sin, a sin + b cos)``.

    Shape:
        x: (..., L, D); cos, sin: broadcastable to (..., L, D/2). Returns (..., L, D).
    """
    layout = _check_layout(layout)
    check_tensor("x", x)
    check_rank("x", x, "(..., L, D)", min_rank=2)
    if x.shape[-1] % 2:
        raise ValueError(f"x: expected shape (..., L, D) with D even (pairs), got {shape_str(x)}")
    for name, t in (("cos", cos), ("sin", sin)):
        check_tensor(name, t)
        if t.dim() < 1 or t.shape[-1] != x.shape[-1] // 2:
            raise ValueError(
                f"{name}: expected shape (..., L, D/2) with D/2 = {x.shape[-1] // 2} "
                f"(x of shape {shape_str(x)}), got {shape_str(t)}"
            )
    if layout == "half":
        a, b = x.chunk(2, dim=-1)  # (..., L, D) -> 2 x (..., L, D/2): pairs (i, i + D/2)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)  # -> (..., L, D)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., L, D) -> 2 x (..., L, D/2): pairs (2i, 2i + 1)
    # (..., L, D/2, 2) -> (..., L, D): put each rotated pair back side by side
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    layout: str = "half",
    base: float = 10000.0,
) -> torch.Tensor:
    """Rotary position embedding: rotate each feature pair of ``x`` by ``position * theta_i``.

    Apply it to queries and keys (not values) after the head split. Rotations keep norms, and
    ``apply_rope(q, m) · apply_rope(k, n)`` depends on ``m`` and ``n`` only through ``m - n``.

    Args:
        x: queries or keys, last dimension D even.
        positions: the position of each of the L tokens: (L,) for every row, or (B, L) with one
            row per batch element (x's first dimension).
        layout: ``"half"`` pairs ``(i, i + D/2)``; ``"interleaved"`` pairs ``(2i, 2i + 1)``.
        base: ``theta_i = base^(-2i/D)``.

    Shape:
        x: (..., L, D), e.g. (B, H, L, D); positions: (L,) or (B, L). Returns (..., L, D).
    """
    check_tensor("x", x)
    check_float("x", x)
    check_rank("x", x, "(..., L, D)", min_rank=2)
    layout = _check_layout(layout)
    D = x.shape[-1]
    if D % 2:
        raise ValueError(
            f"x: expected shape (..., L, D) with D even (RoPE rotates pairs), got {shape_str(x)}"
        )
    cos, sin = rope_angles(_positions_for(x, positions), D, base, dtype=x.dtype)  # (..., L, D/2)
    return rotate_pairs(x, cos.to(x.device), sin.to(x.device), layout)


def rope_permutation(head_dim: int) -> torch.Tensor:
    """The feature order that turns the interleaved layout into the half layout.

    ``perm = [0, 2, 4, ..., D-2, 1, 3, ..., D-1]``: for any x,
    ``apply_rope(x[..., perm], p, layout="half") == apply_rope(x, p, layout="interleaved")[..., perm]``.
    Its inverse (``torch.argsort(perm)``) goes the other way.

    Shape:
        Returns (D,) long.
    """
    D = _check_head_dim(head_dim)
    return torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # (D/2,) + (D/2,) -> (D,)


def convert_rope_layout(
    weight: torch.Tensor,
    num_heads: int,
    head_dim: int,
    to: str = "half",
) -> torch.Tensor:
    """Permute the rows of a query or key projection, head by head, between RoPE layouts.

    A model trained with ``layout="interleaved"`` gives the same attention with
    ``layout="half"`` after ``W_Q`` and ``W_K`` (and their biases) are converted with
    ``to="half"`` — the permutation Hugging Face applies to Meta's Llama weights. Use the key
    heads' count G for ``k_proj``. Values and ``W_O`` stay as they are: scores are unchanged.

    Shape:
        weight: (H * D, E) or a bias (H * D,). Returns the same shape.
    """
    check_tensor("weight", weight)
    D = _check_head_dim(head_dim)
    to = _check_layout(to, "to")
    check_positive_int("num_heads", num_heads, "H")
    if weight.dim() not in (1, 2) or weight.shape[0] != num_heads * D:
        raise ValueError(
            f"weight: expected shape (H * D, E) or (H * D,) with H * D = {num_heads} * {D} = "
            f"{num_heads * D}, got {shape_str(weight)}"
        )
    perm = rope_permutation(D).to(weight.device)
    if to == "interleaved":
        perm = torch.argsort(perm)
    rest = weight.shape[1:]
    per_head = weight.reshape(num_heads, D, *rest)  # (H*D, ...) -> (H, D, ...)
    return per_head[:, perm].reshape(weight.shape)  # (H, D, ...) rows permuted -> (H*D, ...)

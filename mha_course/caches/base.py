"""The one interface every KV cache of the course follows (chapters 5, 7 and 14–16), and the one
KV-size formula (:func:`kv_cache_elements`, :func:`kv_cache_bytes`) they are all measured against.

A cache belongs to ONE attention layer and one batch of sequences. :class:`Cache` fixes what each
of its members means, so a caller (``MultiHeadAttention(...)(x, kv_cache=cache)``, a GPT's list of
per-layer caches, a test) can use any of them without asking which one it holds:

- ``update(key, value)`` stores this call's new tokens and returns what attention must read now
  (all cached keys/values, dequantized or gathered where the cache stores them otherwise). A call
  it rejects raises ``ValueError`` and leaves the cache exactly as it was.
- ``length`` is the number of tokens SEEN: the position of the next token (what RoPE and the
  causal mask use), even when the cache keeps fewer (a sliding window).
- ``nbytes`` is the bytes of the tokens it HOLDS now; ``allocated_bytes`` the bytes it has
  reserved (a preallocated buffer, a full ring, whole blocks), ``>= nbytes``.
- ``reset()`` starts a new sequence; ``restrict_mask(mask, L)`` turns a mask over all ``length``
  positions into one over the keys ``update`` returned (the identity unless the cache drops
  tokens).
- ``mask_positions(L)`` says, BEFORE the update of ``L`` new tokens, the positions of the keys
  that update will return, in its order (None: all of ``0 .. length + L - 1``), so that a caller
  builds its masks once at the size attention reads (transformers' ``get_mask_sizes``), not over
  every position seen and then cut; ``restrict_mask`` takes such a mask as it is.

Hugging Face's ``transformers.Cache`` plays the same role with one object for all layers
(``update(key, value, layer_idx)``, ``get_seq_length()``, ``reset()``, and per-layer mask sizes);
here a cache is per layer, so a model holds a list of them (``GPT.new_caches()``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from mha_course._checks import (
    check_float,
    check_nonnegative_int,
    check_positive_int,
    check_rank,
    check_tensor,
    shape_str,
)


def tensor_bytes(tensors: tuple[torch.Tensor, ...]) -> int:
    """Bytes of the elements of these tensors (of the views themselves, not their storages)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def kv_cache_elements(
    num_layers: int,
    num_kv_heads: int | None,
    head_dim: int | None,
    seq_len: int = 1,
    batch: int = 1,
    *,
    latent_dim: int | None = None,
    rope_dim: int = 0,
) -> int:
    """Numbers a KV cache holds — the course's one KV-size formula (:func:`kv_cache_bytes`
    and chapter 8's ``kv_bytes_per_token`` multiply it by the bytes per element).

    MHA/GQA/MQA cache ``2 · G · D`` elements per token per layer: the 2 counts keys and
    values, and only the key/value heads G count — not the query heads H — which is the
    whole point of MQA/GQA. Multi-head latent attention (chapter 15, ``latent_dim=C``) caches
    one latent of C features shared by keys and values of all heads plus the shared rotary key
    of ``rope_dim`` R features: ``C + R`` elements (``num_kv_heads`` and ``head_dim`` are then
    unused and may be None). Total: ``num_layers · per_token · seq_len · batch``.

    Shape:
        The cache of one layer is key, value: (B, G, S, D) each — or latent (B, S, C) and rotary
        key (B, S, R) — with B = ``batch`` and S = ``seq_len``. Returns an int (elements).
    """
    sizes = [("num_layers", num_layers), ("seq_len", seq_len), ("batch", batch)]
    if latent_dim is None:
        sizes += [("num_kv_heads", num_kv_heads), ("head_dim", head_dim)]
    else:
        sizes += [("latent_dim", latent_dim)]
    for name, n in sizes:
        check_positive_int(name, n)
    check_nonnegative_int("rope_dim", rope_dim, "R")
    per_token = 2 * num_kv_heads * head_dim if latent_dim is None else latent_dim + rope_dim
    return num_layers * per_token * seq_len * batch


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int | None,
    head_dim: int | None,
    seq_len: int = 1,
    batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    *,
    latent_dim: int | None = None,
    rope_dim: int = 0,
) -> int:
    """Bytes a KV cache holds: :func:`kv_cache_elements` (``2 · G · D`` per token and layer for
    MHA/GQA/MQA, ``C + R`` for MLA) times ``dtype``'s bytes per element.

    Shape:
        The cache of one layer is key, value: (B, G, S, D) each — or latent (B, S, C) and rotary
        key (B, S, R) — with B = ``batch`` and S = ``seq_len``. Returns an int (bytes).
    """
    elements = kv_cache_elements(
        num_layers, num_kv_heads, head_dim, seq_len, batch, latent_dim=latent_dim, rope_dim=rope_dim
    )
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype: expected a torch.dtype such as torch.bfloat16, got {dtype!r}")
    return elements * torch.empty((), dtype=dtype).element_size()


class Cache(ABC):
    """A KV cache of one attention layer (see the module docstring for what each member means).

    A subclass implements ``update``, ``reset``, ``length`` and ``held`` (the tensors holding the
    cached tokens now); ``allocated`` (the tensors reserved), ``restrict_mask`` (a cache that drops
    tokens narrows the mask) and the byte counts follow from those.

    Shape:
        update: key (B, G, S_new, D), value (B, G, S_new, Dv) -> the keys/values to attend over.
    """

    def __len__(self) -> int:
        return self.length

    @property
    @abstractmethod
    def length(self) -> int:
        """Tokens seen so far: the position of the next token (0 when empty)."""

    @abstractmethod
    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens; return everything attention reads now."""

    @abstractmethod
    def reset(self) -> None:
        """Forget every token (start a new sequence)."""

    @abstractmethod
    def held(self) -> tuple[torch.Tensor, ...]:
        """The tensors (or views) holding the cached tokens now; () when empty."""

    def allocated(self) -> tuple[torch.Tensor, ...]:
        """The tensors reserved, filled or not (the same as :meth:`held` unless preallocated)."""
        return self.held()

    @property
    def nbytes(self) -> int:
        """Bytes of the tokens held now."""
        return tensor_bytes(self.held())

    @property
    def allocated_bytes(self) -> int:
        """Bytes reserved (``>= nbytes``)."""
        return tensor_bytes(self.allocated())

    def mask_positions(self, L: int) -> torch.Tensor | None:
        """The positions of the keys the next ``update`` of ``L`` tokens returns, in its order:
        None here (every position ``0 .. length + L - 1``, in order).

        Shape:
            Returns (S_read,) int64, or None.
        """
        return None

    def restrict_mask(self, mask: torch.Tensor | None, L: int) -> torch.Tensor | None:
        """A mask over all ``length`` positions -> one over the keys the last ``update`` returned.
        Every position is kept here, so the mask is returned as it is.

        Shape:
            mask: broadcastable to (B, H, L, length), or None.
        """
        return mask


def kv_signature(key: object, value: object) -> tuple | None:
    """What :func:`check_new_kv`'s verdict on ``(key, value)`` depends on, besides the held
    tensors: their sizes, dtypes and devices (None if either is not a tensor). A cache that
    checked one call may skip the checks of the next call with the same signature against
    the same held tensors (a decode step: one new position at a time) — the verdict is the same.
    """
    if type(key) is not torch.Tensor or type(value) is not torch.Tensor:
        return None
    return (key.shape, value.shape, key.dtype, value.dtype, key.device, value.device)


def check_new_kv(
    key: object,
    value: object,
    held: tuple[torch.Tensor, torch.Tensor] | None,
    *,
    names: tuple[str, str] = ("key", "value"),
    letters: tuple[str, str] = ("(B, G, S, D)", "(B, G, S, Dv)"),
) -> None:
    """The checks of every KV cache's ``update``: float tensors ``key (B, G, S, D)`` and ``value
    (B, G, S, Dv)`` of one dtype with the same sizes but the last; and, when the cache already holds
    ``held = (key, value)``, the same sizes but S (dimension -2), dtype and device as those.
    ``names``/``letters`` name another pair with S second to last: MLA's ``latent (B, S, C)`` and
    ``rope_key (B, S, R)``.

    Shape:
        key: (B, G, S_new, D), value: (B, G, S_new, Dv); held: (B, G, *, D) and (B, G, *, Dv).
    """
    for name, t, spec in zip(names, (key, value), letters):
        check_tensor(name, t)
        check_float(name, t)
        check_rank(name, t, spec, rank=spec.count(",") + 1)
    first, second = names
    if value.shape[:-1] != key.shape[:-1]:
        want = ", ".join([*map(str, key.shape[:-1]), letters[1].strip("()").split(", ")[-1]])
        raise ValueError(
            f"{second}: expected shape {letters[1]} = ({want}) like {first}'s, "
            f"got {shape_str(value)}"
        )
    if value.dtype != key.dtype:
        raise ValueError(f"{second}: expected dtype {key.dtype} ({first}'s), got {value.dtype}")
    if held is None:
        return
    for name, spec, new, old in zip(names, letters, (key, value), held):
        if new.shape[:-2] + new.shape[-1:] != old.shape[:-2] + old.shape[-1:]:  # all sizes but S
            want = ", ".join([*map(str, old.shape[:-2]), "S", str(old.shape[-1])])
            raise ValueError(
                f"{name}: expected shape {spec} = ({want}) to match the cache, got "
                f"{shape_str(new)}; call reset() to start a new sequence"
            )
        if (new.dtype, new.device) != (old.dtype, old.device):
            raise ValueError(
                f"{name}: expected dtype {old.dtype} on {old.device} to match the cache, "
                f"got {new.dtype} on {new.device}"
            )

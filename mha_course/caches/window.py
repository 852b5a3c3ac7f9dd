"""Chapter 14: fewer cached tokens — sliding-window attention, a ring-buffer KV cache and
attention sinks (StreamingLLM), and the cache memory of interleaved local/global layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mha_course._checks import check_nonnegative_int, check_positive_int
from mha_course.caches.base import Cache, check_new_kv, kv_cache_bytes
from mha_course.ops.masks import combine_masks


def _check_window(window: object, num_sink: object = 0) -> None:
    check_positive_int("window", window, "W (keys per query)")
    check_nonnegative_int("num_sink", num_sink, "(first tokens kept)")


def sliding_window_mask(
    L: int,
    S: int | None = None,
    *,
    window: int,
    offset: int = 0,
    num_sink: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bool banded mask, True = may attend: query ``i`` (at position ``p = i + offset``) sees
    keys ``j`` with ``p - W < j <= p`` — itself and the ``W - 1`` before it — plus, with
    ``num_sink = n``, the first ``n`` keys ``j < n`` (attention sinks), never the future.

    ``offset`` is the number of keys before the first query (the tokens already cached), as
    in :func:`mha_course.causal_mask`; ``window >= S`` gives back the causal mask.

    Shape:
        Returns (L, S) with S = L + offset by default.
    """
    _check_window(window, num_sink)
    check_nonnegative_int("L", L, "(queries)")
    check_nonnegative_int("offset", offset, "(keys before the first query)")
    S = L + offset if S is None else check_nonnegative_int("S", S, "(keys)")
    p = torch.arange(offset, offset + L, device=device)[:, None]  # (L, 1) query positions
    j = torch.arange(S, device=device)[None, :]  # (1, S) key positions
    return _visible(p, j, window, num_sink)


def _visible(p: torch.Tensor, j: torch.Tensor, window: int, num_sink: int) -> torch.Tensor:
    """The band rule on absolute positions: (L, 1) queries vs (1, S) keys -> (L, S) bool."""
    return (j <= p) & ((j > p - window) | (j < num_sink))


def receptive_field(num_layers: int, window: int) -> int:
    """Tokens one output can depend on after ``num_layers`` sliding-window layers:
    each layer reaches ``W - 1`` further back, so ``num_layers · (W - 1) + 1``."""
    _check_window(window)
    check_positive_int("num_layers", num_layers)
    return num_layers * (window - 1) + 1


class SlidingWindowCache(Cache):
    """A KV cache of fixed size: a ring buffer holding the last ``window`` W tokens, plus the
    first ``num_sink`` tokens kept forever (attention sinks, StreamingLLM).

    Pass it as ``MultiHeadAttention(...)(x, kv_cache=cache, is_causal=True)``. ``length``
    counts every token seen (the position of the next one, which RoPE and the causal mask
    use); the ring overwrites slot ``(p - num_sink) % W`` with token ``p``, so the cache never
    holds more than ``W + num_sink`` tokens. The slots are not in position order, and they
    need not be: attention sums over keys, only the mask must know each key's position
    (``key_positions``), which :meth:`restrict_mask` uses to apply the band. Decoding equals
    the full forward with :func:`sliding_window_mask`, token by token or in chunks. Follows
    :class:`mha_course.caches.base.Cache`: ``nbytes`` counts the ``num_cached`` tokens held,
    ``allocated_bytes`` the buffers (``W + num_sink`` tokens from the first update on).

    Shape:
        ring key: (B, G, W, D), value: (B, G, W, Dv); sinks (B, G, num_sink, D / Dv);
        ``key_positions`` after an update: (S_kept,), S_kept <= num_sink + W + S_new.
    """

    def __init__(self, window: int, num_sink: int = 0) -> None:
        _check_window(window, num_sink)
        self.window, self.num_sink = window, num_sink
        self.key: torch.Tensor | None = None  # ring (B, G, W, D)
        self.value: torch.Tensor | None = None  # ring (B, G, W, Dv)
        self.sink_key: torch.Tensor | None = None  # (B, G, num_sink, D)
        self.sink_value: torch.Tensor | None = None  # (B, G, num_sink, Dv)
        self.slot_position: torch.Tensor | None = (
            None  # (W,) position held by each slot, -1 = empty
        )
        self.key_positions: torch.Tensor | None = None
        self._length = 0

    @property
    def length(self) -> int:
        """Tokens seen (the position of the next one), not the tokens held (``num_cached``)."""
        return self._length

    @length.setter
    def length(
        self, n: int
    ) -> None:  # restoring a saved state (the ring, its positions, the count)
        self._length = n

    @property
    def num_cached(self) -> int:
        """Tokens held now: ``min(length, num_sink) + min(max(length - num_sink, 0), W)``."""
        sinks = min(self.length, self.num_sink)
        return sinks + min(self.length - sinks, self.window)

    def held(self) -> tuple[torch.Tensor, ...]:
        """The filled sinks and ring slots, (B, G, num_cached, D) and (B, G, num_cached, Dv)."""
        if self.key is None or not self._length:
            return ()
        sinks, filled = (
            min(self._length, self.num_sink),
            (self.slot_position >= 0).nonzero().flatten(),
        )
        # (B, G, sinks, D) + (B, G, filled, D) -> (B, G, num_cached, D); the same for values
        return (
            torch.cat([self.sink_key[:, :, :sinks], self.key[:, :, filled]], dim=2),
            torch.cat([self.sink_value[:, :, :sinks], self.value[:, :, filled]], dim=2),
        )

    def allocated(self) -> tuple[torch.Tensor, ...]:
        """The ring and sink buffers (allocated at full size on the first update)."""
        bufs = (self.key, self.value, self.sink_key, self.sink_value)
        return tuple(t for t in bufs if t is not None)

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.__init__(self.window, self.num_sink)

    def _allocate(self, key: torch.Tensor, value: torch.Tensor) -> None:
        B, G, _, D = key.shape
        Dv = value.shape[-1]
        f = {"dtype": key.dtype, "device": key.device}
        self.key, self.value = (
            key.new_zeros(B, G, self.window, D),
            value.new_zeros(B, G, self.window, Dv),
        )
        self.sink_key = torch.zeros(B, G, self.num_sink, D, **f)
        self.sink_value = torch.zeros(B, G, self.num_sink, Dv, **f)
        self.slot_position = torch.full((self.window,), -1, dtype=torch.long, device=key.device)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the kept keys/values followed by the new ones, then store the new ones.

        Shape:
            key: (B, G, S_new, D), value: (B, G, S_new, Dv). Returns key (B, G, S_kept, D),
            value (B, G, S_kept, Dv), the positions in ``key_positions`` (S_kept,).
        """
        check_new_kv(key, value, None if self.key is None else (self.key, self.value))
        if self.key is None:
            self._allocate(key, value)
        n, W, start = self.num_sink, self.window, self._length
        S_new = key.shape[2]
        new_pos = torch.arange(start, start + S_new, device=key.device)  # (S_new,)
        sinks = min(start, n)
        filled = (self.slot_position >= 0).nonzero().flatten()  # occupied ring slots
        positions = torch.cat(
            [torch.arange(sinks, device=key.device), self.slot_position[filled], new_pos]
        )
        # (B, G, sinks, D) + (B, G, filled, D) + (B, G, S_new, D) -> (B, G, S_kept, D)
        k_all = torch.cat([self.sink_key[:, :, :sinks], self.key[:, :, filled], key], dim=2)
        v_all = torch.cat([self.sink_value[:, :, :sinks], self.value[:, :, filled], value], dim=2)
        # Store: positions < n go to the sinks, the last W of the others into their ring slots.
        to_sink = new_pos < n
        self.sink_key[:, :, new_pos[to_sink]] = key[:, :, to_sink]
        self.sink_value[:, :, new_pos[to_sink]] = value[:, :, to_sink]
        ring = (~to_sink).nonzero().flatten()[-W:]  # indices into the new tokens
        slots = (new_pos[ring] - n) % W  # the ring index wraps
        self.key[:, :, slots] = key[:, :, ring]
        self.value[:, :, slots] = value[:, :, ring]
        self.slot_position[slots] = new_pos[ring]
        self.key_positions, self._length = positions, start + S_new
        return k_all, v_all

    def mask_positions(self, L: int) -> torch.Tensor:
        """The positions the next ``update`` of ``L`` tokens returns: the sinks, the filled ring
        slots (in slot order), then the ``L`` new ones — what a caller builds its mask over.

        Shape:
            Returns (S_kept,) int64, S_kept <= num_sink + W + L.
        """
        check_nonnegative_int("L", L, "(new tokens)")
        start = self._length
        device = None if self.slot_position is None else self.slot_position.device
        new = torch.arange(start, start + L, device=device)
        if self.slot_position is None:
            return new
        filled = (self.slot_position >= 0).nonzero().flatten()
        return torch.cat(
            [
                torch.arange(min(start, self.num_sink), device=device),
                self.slot_position[filled],
                new,
            ]
        )

    def restrict_mask(self, mask: torch.Tensor | None, L: int) -> torch.Tensor:
        """Apply the band to a mask over the kept keys (built at :meth:`mask_positions`) or over
        all ``length`` positions (gathered first): the last ``L`` positions are the queries.

        Shape:
            mask: broadcastable to (B, H, L, S_kept) or (B, H, L, length), or None.
            Returns (..., L, S_kept).
        """
        if self.key_positions is None:
            raise ValueError("kv_cache: restrict_mask needs an update() first")
        j = self.key_positions
        p = torch.arange(self.length - L, self.length, device=j.device)[:, None]  # (L, 1)
        band = _visible(p, j[None, :], self.window, self.num_sink)  # (L, S_kept)
        if mask is None:
            return band
        # a mask already at the kept size is used as it is (when S_kept == length nothing was
        # dropped yet, the slots are in position order, and both readings agree)
        kept = mask.shape[-1] in (1, j.numel())
        gathered = mask if kept else mask[..., j]  # (..., L, length) -> (..., L, S_kept)
        dtype = mask.dtype if mask.is_floating_point() else torch.float32
        return combine_masks(gathered, band, dtype=dtype)


def layout_cache_bytes(
    windows: Sequence[int | None],
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    batch: int = 1,
    dtype: torch.dtype = torch.bfloat16,
    num_sink: int = 0,
) -> int:
    """KV-cache bytes of a stack whose layer ``l`` is local (window ``windows[l]``, caching
    ``min(seq_len, W + num_sink)`` tokens) or global (``None``: all ``seq_len`` tokens), e.g.
    five local layers then one global as in Gemma 3. Each layer is :func:`kv_cache_bytes`.

    Shape:
        Every layer's cache is key, value: (B, G, S_l, D). Returns an int (bytes).
    """
    total = 0
    for w in windows:
        if w is not None:
            _check_window(w, num_sink)
        tokens = seq_len if w is None else min(seq_len, w + num_sink)
        total += kv_cache_bytes(1, num_kv_heads, head_dim, tokens, batch, dtype)
    return total

"""Chapter 14: attention sinks as StreamingLLM runs them — positions renumbered inside the cache.

:class:`~mha_course.caches.window.SlidingWindowCache` keeps every key rotated at its position in the
text, so a sink (token 0 … n − 1) seen from position p is p tokens away: a distance a RoPE model
never met in training once p passes its context. StreamingLLM (Xiao et al., 2023, §3.2) and
Hugging Face's ``SinkCache`` instead number the *cache*: the kept keys sit at positions
0 … S_kept − 1 in the order of the text (sinks first, then the window) and the newest query at
S_kept − 1, so no query–key distance ever exceeds the cache size. To do that the cache stores
keys **before** rotation and rotates them on every read by their index in the cache.

:class:`RenumberedSinkCache` does exactly that on top of ``SlidingWindowCache``'s storage
(window.py is unchanged). ``MultiHeadAttention`` hands the cache keys already rotated at their
text positions and rotates the query at its text position ``p``; the cache undoes the key
rotation (RoPE is a rotation: rotating by −p inverts it) and re-rotates each kept key at
``c + (p − q)``, where ``c`` is the key's index in the cache and ``q`` the query's. RoPE's
scores depend only on the difference of the two positions, so the query at ``p`` then sees each
key at distance ``q − c``: StreamingLLM's numbering, exactly (to rounding).

Renumbering changes nothing while the text fits the cache (index = position). After that it is
defined for one query at a time: decode token by token, as StreamingLLM does.
"""

from __future__ import annotations

import torch

from mha_course._checks import check_base
from mha_course.caches.window import SlidingWindowCache, _visible
from mha_course.ops.rope import LAYOUTS as ROPE_LAYOUTS
from mha_course.ops.rope import apply_rope


class RenumberedSinkCache(SlidingWindowCache):
    """The last ``window`` W tokens plus the first ``num_sink`` n, with RoPE positions numbered
    inside the cache (StreamingLLM), for a ``MultiHeadAttention(..., rope=layout)`` layer.

    ``rope`` and ``rope_base`` must be the attention layer's own (``attn.rope``,
    ``attn.rope_base``). Keys are stored unrotated; :meth:`update` returns them rotated so that
    the newest query sees the kept key of cache index ``c`` at distance ``S_visible − 1 − c``.

    Shape:
        as :class:`SlidingWindowCache`: update key (B, G, S_new, D), value (B, G, S_new, Dv)
        -> key (B, G, S_kept, D), value (B, G, S_kept, Dv).
    """

    def __init__(
        self, window: int, num_sink: int = 0, *, rope: str = "half", rope_base: float = 10000.0
    ) -> None:
        if rope not in ROPE_LAYOUTS:
            raise ValueError(
                f"rope: expected one of {ROPE_LAYOUTS} (the attention layer's layout), got {rope!r}"
            )
        check_base("rope_base", rope_base)
        super().__init__(window, num_sink)
        self.rope, self.rope_base = rope, float(rope_base)

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        rope, base = self.rope, self.rope_base
        super().reset()
        self.rope, self.rope_base = rope, base

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return apply_rope(x, positions.to(x.dtype), layout=self.rope, base=self.rope_base)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new keys unrotated; return the kept keys rotated at cache positions.

        Shape:
            key: (B, G, S_new, D) rotated at text positions length … length + S_new − 1;
            value: (B, G, S_new, Dv). Returns key (B, G, S_kept, D), value (B, G, S_kept, Dv).
        """
        start, S_new = self.length, key.shape[-2] if key.dim() == 4 else 0
        if S_new > 1 and start + S_new > self.window + self.num_sink:
            raise ValueError(
                f"key: renumbered positions need one query at a time once the text outgrows the "
                f"cache (W + num_sink = {self.window + self.num_sink} tokens); got S_new = "
                f"{S_new} new tokens after {start}: feed them one at a time (S_new = 1)"
            )
        new_pos = torch.arange(start, start + S_new, device=key.device)  # (S_new,)
        raw = self._rotate(key, -new_pos) if key.dim() == 4 else key  # undo the text rotation
        k_all, v_all = super().update(raw, value)  # (B, G, S_kept, D), unrotated
        j = self.key_positions  # (S_kept,) text positions of the kept keys
        p = self.length - 1  # the newest query's text position
        if S_new > 1 or p < self.window + self.num_sink:  # nothing evicted yet: index = position
            return self._rotate(k_all, j), v_all
        visible = _visible(
            torch.tensor([[p]], device=j.device), j[None, :], self.window, self.num_sink
        )[0]  # (S_kept,) what the newest query may see
        order = torch.argsort(torch.where(visible, j, j.max() + 1 + j))  # visible ones first, by j
        index = torch.empty_like(j)
        index[order] = torch.arange(len(j), device=j.device)  # cache index of each kept key
        q_index = int(visible.sum()) - 1  # the query is the newest visible key
        return self._rotate(k_all, index + (p - q_index)), v_all

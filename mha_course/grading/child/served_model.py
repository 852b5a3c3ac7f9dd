"""Exercise 5's language model, served by the grader: weights and token counter stay in the parent.

``ModelService`` (PARENT) holds the seeded :class:`~mha_course.models.tiny_lm.TinyCausalLM`, one real
:class:`~mha_course.caches.dense.KVCache` per handle it hands out, and counts every token it is fed.
``RemoteModel`` (CHILD, what the learner's ``greedy_generate`` receives) looks like the model —
``model(ids, caches)``, ``model.new_caches()``, ``num_layers``, ``vocab_size`` — and forwards
each call over the grader's channel (``mha_grader/sandbox/channel.py``). The weights never enter the
sandbox (the seed is a hidden case value, drawn from 2**62), so the right tokens can only come
from the parent's model, and the parent alone decides whether at most P + n_new tokens per
sequence were fed (the cached loop) or the prefix again every step (the O(T²) one).

Requests (the proxy checks its arguments first, so anything else was forged):
``info`` {} -> {num_layers, vocab_size, max_len}; ``new_cache`` {} -> {cache: handle};
``forward`` {ids: (B, L) list of ints in [0, V), caches: null | [handle] * num_layers}
-> {logits: (B, L, V) floats, lengths: [cached positions per handle]}.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.caches.dense import KVCache
from mha_course.models.tiny_lm import TinyCausalLM
from mha_grader.sandbox import channel
from mha_grader.sandbox.channel import Refused, Violation, want_keys

MAX_ROWS, MAX_LEN, MAX_CACHES = 64, 64, 64
FED_CAP = 8  # an uncached loop feeds ~2-3x the budget here (its mistake is still named); far more is a hammer


class ModelService(channel.Service):
    """PARENT side: the real model and caches for one case; counts the tokens fed (B · L per call)."""

    def __init__(self, model: TinyCausalLM, batch: int, prompt_len: int, n_new: int) -> None:
        self.model, self.caches = model, []
        self.budget = batch * (prompt_len + n_new)  # the cached loop feeds P + n_new - 1 per row
        self.fed = 0

    def handle(self, op: str, args: dict) -> dict:
        m = self.model
        if op == "info":
            want_keys(args)
            return {"num_layers": m.num_layers, "vocab_size": m.vocab_size, "max_len": m.max_len}
        if op == "new_cache":
            want_keys(args)
            if len(self.caches) >= MAX_CACHES:
                raise Violation("too many caches")
            self.caches.append(KVCache())
            return {"cache": len(self.caches) - 1}
        if op != "forward":
            raise Violation("not an op of the model")
        want_keys(args, "ids", "caches")
        ids, handles = _ids(args["ids"], m.vocab_size), args["caches"]
        if handles is not None and (
            type(handles) is not list
            or len(handles) != m.num_layers
            or not all(type(h) is int and 0 <= h < len(self.caches) for h in handles)
        ):
            raise Violation("caches: expected null or one known cache handle per layer")
        self.fed += len(ids) * len(ids[0])
        if self.fed > FED_CAP * self.budget:  # the parent's CPU is not under the child's limits
            raise Violation(f"fed more than {FED_CAP}x the tokens the task needs")
        caches = None if handles is None else [self.caches[h] for h in handles]
        try:
            with torch.no_grad():
                logits = m(torch.tensor(ids, dtype=torch.int64), caches)
        except ValueError as e:  # the model's own words (shapes, max_len): our text, not theirs
            raise Refused(str(e)) from None
        return {"logits": logits.tolist(), "lengths": [c.length for c in self.caches]}

    def judged(self, outputs: list) -> list:
        """(the learner's ids, whether the model was fed at most P + n_new tokens per sequence)."""
        return [outputs[0], np.array(self.fed <= self.budget)]


def _ids(ids: object, vocab: int) -> list[list[int]]:
    if (
        type(ids) is not list
        or not 0 < len(ids) <= MAX_ROWS
        or type(ids[0]) is not list
        or not 0 < len(ids[0]) <= MAX_LEN
    ):
        raise Violation(f"ids: expected (B, L) with B <= {MAX_ROWS}, L <= {MAX_LEN}")
    n = len(ids[0])
    for row in ids:
        if (
            type(row) is not list
            or len(row) != n
            or not all(type(t) is int and 0 <= t < vocab for t in row)
        ):
            raise Violation(f"ids: expected rows of {n} ints in [0, {vocab})")
    return ids


class RemoteCache:
    """CHILD side: a handle to one layer's KVCache, which the grader holds."""

    def __init__(self, handle: int) -> None:
        self.handle, self.length = handle, 0

    def __len__(self) -> int:
        return self.length


class RemoteModel:
    """CHILD side: the model as the learner's code sees it while grading (see the module doc).

    Shape:
        ids: (B, L) int64 token ids; returns logits (B, L, V) float64.
    """

    def __init__(self, client: channel.Client) -> None:
        self._client = client
        info = client.call("info")
        self.num_layers, self.vocab_size, self.max_len = (
            int(info[k]) for k in ("num_layers", "vocab_size", "max_len")
        )
        self._own: dict[int, tuple[object, RemoteCache]] = {}  # caches the learner made themselves

    def new_caches(self) -> list[RemoteCache]:
        """One empty KV cache per layer (held by the grader)."""
        return [
            RemoteCache(int(self._client.call("new_cache")["cache"]))
            for _ in range(self.num_layers)
        ]

    def eval(self) -> RemoteModel:
        return self

    def _handle(self, cache: object) -> RemoteCache:
        if isinstance(cache, RemoteCache):
            return cache
        if not isinstance(cache, KVCache):
            raise ValueError(
                f"caches: expected a list of KVCache (one per layer), got {type(cache).__name__}"
            )
        if id(cache) not in self._own:  # your own KVCache(): the grader makes one for it
            self._own[id(cache)] = (
                cache,
                RemoteCache(int(self._client.call("new_cache")["cache"])),
            )
        return self._own[id(cache)][1]

    def __call__(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        if (
            not isinstance(ids, torch.Tensor)
            or ids.dim() != 2
            or ids.dtype not in (torch.int64, torch.int32)
        ):
            raise ValueError(f"ids: expected a (B, L) tensor of int64 token ids, got {_kind(ids)}")
        if not (0 < ids.shape[0] <= MAX_ROWS and 0 < ids.shape[1] <= MAX_LEN):
            raise ValueError(
                f"ids: expected (B, L) with 0 < B <= {MAX_ROWS} and 0 < L <= {MAX_LEN}, "
                f"got {tuple(ids.shape)}"
            )
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise IndexError("index out of range in self")  # what nn.Embedding says
        handles = None
        if caches is not None:
            if len(caches) != self.num_layers:
                raise ValueError(
                    f"caches: expected a list of {self.num_layers} KVCache (one per layer), "
                    f"got {len(caches)}"
                )
            handles = [self._handle(c) for c in caches]
        reply = self._client.call(
            "forward",
            ids=ids.tolist(),
            caches=None if handles is None else [h.handle for h in handles],
        )
        for h in handles or ():
            h.length = int(reply["lengths"][h.handle])
        return torch.tensor(reply["logits"], dtype=torch.float64)

    forward = __call__


def _kind(x: object) -> str:
    return f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__

"""Chapter 14 on a trained GPT: decoding far past the training context, with and without sinks.

Chapter 13's recipe with rotary positions (``configs/ch13/mha_rope.json``: trained on windows of
T = 64 characters) decodes validation text ``length_factor`` x T characters long, one character
at a time through one cache per layer, with

- ``full``: the float :class:`~mha_course.KVCache` (every earlier token; relative distances up to
  N - 1, far more than the 63 seen in training),
- ``window S``: :class:`~mha_course.caches.window.SlidingWindowCache` of the last S tokens (the oldest
  are evicted),
- ``window S-n + n sinks``: the last S - n tokens plus the first n (StreamingLLM's attention
  sinks) — the same S cached tokens as ``window S``.

The cache keeps each key rotated at its position in the text (the course's
``SlidingWindowCache``), so a sink seen from position p is p tokens away; StreamingLLM instead
re-numbers positions inside the cache — not measured here. Losses are in nats per character,
per block of T positions. The attention mass on the first token is measured by full forwards
inside the training context (``first_token_mass``) and past it (``first_token_mass_far``).

Run ``python -m mha_course.experiments.long_context`` (225 s on one CPU thread of a shared
machine at load average 9-20); it writes ``results/ch14_long_context.json`` (stamped), which
notebook 14 loads.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from mha_course.benchmark.stamp import environment_stamp
from mha_course.caches.dense import KVCache
from mha_course.caches.window import SlidingWindowCache
from mha_course.experiments._common import run_main, write_result
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.heads import attention_weights

SCHEMA = "mha-course-ch14-long-context/2"  # 2: "block_size" is now "context_length" (GPTConfig's T)
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch14_long_context.json"
CHECKPOINT = "ch13_mha_rope.pt"
CACHE_SIZES = (16, 32, 64)
NUM_SINK = 4


def cache_kinds(sizes=CACHE_SIZES, num_sink: int = NUM_SINK) -> dict[str, Callable[[], object]]:
    """Name -> factory of one layer's cache: the full cache, and for each size S a window of S
    and a window of S - ``num_sink`` plus ``num_sink`` sinks (S cached tokens both)."""
    kinds: dict[str, Callable[[], object]] = {"full": KVCache}
    for s in sizes:
        if s <= num_sink:
            raise ValueError(f"sizes: expected cache sizes > num_sink = {num_sink}, got {s}")
        kinds[f"window {s}"] = lambda s=s: SlidingWindowCache(s)
        kinds[f"window {s - num_sink} + {num_sink} sinks"] = lambda s=s: SlidingWindowCache(
            s - num_sink, num_sink
        )
    return kinds


def segments(ids: torch.Tensor, length: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``count`` non-overlapping stretches of ``length`` ids and their next ids.

    Shape:
        ids: (N,). Returns x, y: (count, length) with y[:, t] = x[:, t + 1]'s successor.
    """
    if count <= 0 or count * length + 1 > ids.numel():
        raise ValueError(
            f"count: expected 1..{(ids.numel() - 1) // length} stretches of "
            f"{length} ids in {ids.numel()}, got {count}"
        )
    chunk = ids[: count * length + 1]
    x = chunk[:-1].view(count, length)  # (count*length,) -> (count, length)
    y = chunk[1:].view(count, length)
    return x, y


@torch.no_grad()
def decode_losses(
    model, x: torch.Tensor, y: torch.Tensor, make: Callable[[], object]
) -> torch.Tensor:
    """Next-token loss at every position when decoding ``x`` one id at a time, each layer
    attending through a fresh cache from ``make``.

    Shape:
        x, y: (B, N). Returns (N,): the loss at each position, averaged over the batch.
    """
    caches = [make() for _ in range(model.config.n_layer)]
    losses = []
    for t in range(x.shape[1]):
        logits = model(x[:, t : t + 1], caches=caches)[:, 0]  # (B, 1) -> (B, 1, V) -> (B, V)
        losses.append(F.cross_entropy(logits.double(), y[:, t], reduction="none").mean())
    return torch.stack(losses)  # N x () -> (N,)


@torch.no_grad()
def first_token_mass(model, x: torch.Tensor, from_position: int = 1) -> dict[str, list]:
    """Per layer and head: the mean attention weight on key 0, and the mean weight on one other
    visible key, for queries at positions >= ``from_position`` (with 1, ``first`` is chapter 13's
    :func:`~mha_course.gpt.heads.first_token_score`).

    Shape:
        x: (B, T). Returns {"first": [[H floats]] * n_layer, "other": same}.
    """
    w = attention_weights(model, x)[:, :, :, from_position:]  # (n_layer, B, H, T - from, T)
    p = torch.arange(from_position, x.shape[1], dtype=w.dtype)  # query positions
    other = (1 - w[..., 0]) / p  # query p shares 1 - w_0 among its p other keys
    first = w[..., 0].mean(dim=(1, 3))  # (n_layer, B, H, T') -> (n_layer, H)
    return {"first": first.tolist(), "other": other.mean(dim=(1, 3)).tolist()}


def summarise(losses: torch.Tensor, context_length: int) -> dict:
    """Mean loss overall, inside the first ``context_length`` (T) positions, past them, and per
    block of T."""
    T = context_length
    blocks = losses.view(-1, T).mean(dim=1) if losses.numel() % T == 0 else losses[:0]
    return {
        "all": round(losses.mean().item(), 5),
        "inside": round(losses[:T].mean().item(), 5),
        "past": round(losses[T:].mean().item(), 5) if losses.numel() > T else None,
        "per_block": [round(v, 5) for v in blocks.tolist()],
    }


def run(
    out: Path = DEFAULT_OUT,
    length_factor: int = 8,
    num_segments: int = 32,
    checkpoint: Path | None = None,
) -> dict:
    t0 = time.perf_counter()
    ckpt = load_checkpoint(checkpoint or ROOT / "checkpoints" / CHECKPOINT)
    model, T = ckpt.model.eval(), ckpt.config.context_length
    _, val_ids = ckpt.data()
    N = length_factor * T
    x, y = segments(val_ids, N, num_segments)
    result = {
        "schema": SCHEMA,
        "checkpoint": Path(checkpoint or CHECKPOINT).name,
        "positions": ckpt.config.positions,
        "context_length": T,
        "length": N,
        "num_segments": num_segments,
        "num_sink": NUM_SINK,
        "cache_sizes": list(CACHE_SIZES),
        "checkpoint_val_loss": ckpt.meta.get("val_loss"),
        "losses": {},
    }
    for name, make in cache_kinds().items():
        result["losses"][name] = summarise(decode_losses(model, x, y, make), T)
    inside = first_token_mass(model, x[:, :T])
    far = first_token_mass(model, x[:8], from_position=T)  # full attention, queries p >= T
    result["first_token_mass"] = {
        k: [[round(v, 4) for v in row] for row in rows] for k, rows in inside.items()
    }
    result["first_token_mass_far"] = {
        k: [[round(v, 5) for v in row] for row in rows] for k, rows in far.items()
    }
    stamp = environment_stamp("cpu")
    if hasattr(os, "getloadavg"):
        stamp["load_average_1min"] = round(os.getloadavg()[0], 2)
    return write_result(
        result,
        out,
        t0,
        stamp,
        command="python -m mha_course.experiments.long_context " + " ".join(sys.argv[1:]),
    )


def _report(r: dict) -> None:
    for name, s in r["losses"].items():
        print(f"{name:>22}: inside {s['inside']:.4f}  past {s['past']}  all {s['all']:.4f}")


def main(argv: list[str] | None = None) -> int:
    arguments = [
        ("--checkpoint", {"type": Path, "default": None}),
        ("--length-factor", {"type": int, "default": 8, "help": "decode N = factor x T ids"}),
        ("--segments", {"type": int, "default": 32, "help": "validation stretches of N ids"}),
    ]
    return run_main(
        __doc__,
        DEFAULT_OUT,
        lambda a: run(a.out, a.length_factor, a.segments, a.checkpoint),
        argv,
        arguments,
        _report,
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""Chapters 14 and 16 on the trained GPT of chapter 13: validation loss with each KV cache.

For each chapter 13 checkpoint (MHA, GQA and MQA), the loss in nats per character on validation
windows of the full 64-character context, when every layer's cache is

- the float ``KVCache`` (the reference; equals ``evaluate``),
- ``QuantizedKVCache`` int8 and 4-bit (per-token scales, chapter 16),
- ``SlidingWindowCache(W)`` with W = 8, 16, 32, the same windows plus 4 attention sinks, and
  windows of W + 4 (the same cache size as window + sinks; chapter 14) — a window the model was NOT trained with (it was trained with full causal
  attention), so this measures what evicting old tokens costs and whether keeping the first
  ones helps,

and the share of attention each layer puts on the first token of the window (queries at positions
>= 16), which is where StreamingLLM's sinks would show. The model uses learned absolute positions
up to 64, so it cannot be run past its training context: the windows here are inside it.

Run ``python -m mha_course.experiments.kv_cache_losses`` (about a minute on one CPU thread); it
writes ``results/part3_cache_losses.json`` (stamped): point estimates on the first 256 windows.
The chapters quote the experiments that pair every validation window instead:
:mod:`~mha_course.experiments.sink_distance` (chapter 14) and :mod:`~mha_course.experiments.kv_quant`
(chapter 16).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..gpt.checkpoint import load_checkpoint
from ..gpt.data import validation_windows
from ..gpt.evaluate import evaluate
from ..gpt.model import lm_loss
from ..kv_cache import KVCache
from ..quant_cache import QuantizedKVCache
from ..window import SlidingWindowCache
from ._common import run_main, write_result

SCHEMA = "mha-course-part3-cache-losses/1"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "part3_cache_losses.json"
CHECKPOINTS = ("ch13_mha.pt", "ch13_gqa.pt", "ch13_mqa.pt")
WINDOWS = (8, 16, 32)
NUM_SINK = 4


def cache_kinds() -> dict[str, Callable[[], object]]:
    kinds: dict[str, Callable[[], object]] = {"float": KVCache,
                                              "int8": lambda: QuantizedKVCache(8),
                                              "int4": lambda: QuantizedKVCache(4)}
    for w in WINDOWS:
        kinds[f"window {w}"] = lambda w=w: SlidingWindowCache(w)
        kinds[f"window {w} + {NUM_SINK} sinks"] = lambda w=w: SlidingWindowCache(w, NUM_SINK)
        # the same cache size without sinks: do the sinks help, or just the 4 extra keys?
        kinds[f"window {w + NUM_SINK}"] = lambda w=w: SlidingWindowCache(w + NUM_SINK)
    return kinds


@torch.no_grad()
def loss_with(model, x: torch.Tensor, y: torch.Tensor, make: Callable[[], object],
              batch_size: int = 64) -> float:
    """Mean next-token loss when each layer attends through a fresh cache of this kind
    (one call per window: the whole window is a prompt chunk through the cache)."""
    total = 0.0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]
        caches = [make() for _ in range(model.config.n_layer)]
        total += lm_loss(model(xb, caches=caches), yb).item() * yb.numel()
    return total / y.numel()


@torch.no_grad()
def first_token_mass(model, x: torch.Tensor, from_position: int = 16) -> list[list[float]]:
    """Mean attention weight on key 0 of queries at positions >= ``from_position``, per layer and head."""
    _, weights = model(x, need_weights=True)  # n_layer x (B, H, T, T)
    return [w[:, :, from_position:, 0].mean(dim=(0, 2)).tolist() for w in weights]


def run(out: Path = DEFAULT_OUT, eval_windows: int = 256) -> dict:
    t0 = time.perf_counter()
    result = {"schema": SCHEMA, "eval_windows": eval_windows, "num_sink": NUM_SINK, "models": {}}
    for name in CHECKPOINTS:
        ckpt = load_checkpoint(ROOT / "checkpoints" / name)
        model, T = ckpt.model, ckpt.config.block_size
        _, val_ids = ckpt.data()
        x, y = validation_windows(val_ids, T, eval_windows)
        losses = {k: round(loss_with(model, x, y, make), 5) for k, make in cache_kinds().items()}
        result["models"][name] = {
            "block_size": T, "n_layer": ckpt.config.n_layer, "n_head": ckpt.config.n_head,
            "n_kv_head": model.blocks[0].attn.num_kv_heads, "head_dim": model.blocks[0].attn.head_dim,
            "losses": losses,
            "evaluate": round(evaluate(model, val_ids, T, max_windows=eval_windows), 5),
            # what uniform attention over keys 0..p would put on key 0, averaged like the above
            "uniform_first_token_mass": round(sum(1 / (p + 1) for p in range(16, T)) / (T - 16), 4),
            "first_token_mass": [[round(v, 4) for v in row] for row in first_token_mass(model, x[:64])],
        }
    return write_result(result, out, t0)


def _report(r: dict) -> None:
    for name, m in r["models"].items():
        print(name, m["losses"], "evaluate:", m["evaluate"])


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, DEFAULT_OUT, lambda a: run(a.out, a.eval_windows), argv,
                    [("--eval-windows", {"type": int, "default": 256})], _report)


if __name__ == "__main__":
    raise SystemExit(main())

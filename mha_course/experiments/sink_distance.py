"""Chapter 14, measured with controls: do attention sinks help the course's trained models?

Two questions, each against its control and with paired standard errors over *all* validation
text (not its first 16,384 characters):

1. **Is token 0 special?** StreamingLLM's sinks are keys that get more attention than their
   distance explains. So compare the weight a query at position d puts on token 0 with the
   weight queries put on a key **at the same distance d** that is not token 0 (queries
   q = d+1 … T−1, key q − d), per head, averaged over d = 1 … T−2 — inside the training context,
   one full forward per validation window of T = 64 (all 593 of them). Weights are taken
   relative to each query's uniform share, 1 / (q + 1). A sink shows as a positive excess;
   uniform attention alone is not the control (it ignores that attention decays with distance).
2. **Do sinks lower the loss?** The RoPE model of chapter 14 §7 decodes every non-overlapping
   stretch of 8 × T = 512 validation characters (74 of them) one character at a time with a
   window of S, a window of S − 4 plus 4 sinks at their text positions
   (:class:`~mha_course.caches.window.SlidingWindowCache`), and the same with positions renumbered in
   the cache as StreamingLLM does (:class:`~mha_course.caches.sink.RenumberedSinkCache`). The
   learned-position models of §6 run every validation window with windows W, W + 4 sinks and
   W + 4 (one prompt chunk through the cache). Differences are paired per stretch / window.

Run ``python -m mha_course.experiments.sink_distance`` (2 minutes on one thread at load 1–3, 6 at load
10); it
writes ``results/ch14_sinks.json``, which chapter 14 §6–8 loads.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mha_course.caches.sink import RenumberedSinkCache
from mha_course.caches.window import SlidingWindowCache
from mha_course.experiments._common import run_main, write_result
from mha_course.experiments.gpt_head_removal import paired
from mha_course.experiments.long_context import segments
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.data import validation_windows
from mha_course.gpt.heads import attention_weights

SCHEMA = "mha-course-ch14-sinks/2"  # 2: "block_size" is now "context_length" (GPTConfig's T)
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch14_sinks.json"
NUM_SINK = 4


@torch.no_grad()
def sink_excess(
    model, x: torch.Tensor, batch_size: int = 64, relative: bool = True
) -> torch.Tensor:
    """Per window, layer and head: mean over d of r(d, 0) − mean_{q>d} r(q, q − d), where
    r(q, j) = (q + 1) · w(q, j) is a weight relative to the query's uniform share 1 / (q + 1)
    (a query at d spreads its weight over fewer keys than one at q > d; this removes that).
    ``relative=False`` compares the raw weights w instead, which favours token 0 (its query d
    has fewer keys to share its weight with): the two bracket the comparison.

    Shape:
        x: (N, T). Returns (N, n_layer, H) float64.
    """
    T = x.shape[1]
    d = torch.arange(1, T - 1)  # distances with at least one other query at that distance
    out = []
    for i in range(0, len(x), batch_size):
        w = attention_weights(model, x[i : i + batch_size]).double()  # (n_layer, b, H, T, T)
        if relative:
            w = w * torch.arange(1, T + 1, dtype=w.dtype)[:, None]  # row q scaled by its q + 1 keys
        first = w[..., d, 0]  # (n_layer, b, H, |d|): query d on key 0
        diag = torch.stack(
            [torch.diagonal(w, -int(k), dim1=-2, dim2=-1)[..., 1:].mean(-1) for k in d], dim=-1
        )  # queries q > d on key q − d -> (n_layer, b, H, |d|)
        out.append((first - diag).mean(-1).permute(1, 0, 2))  # -> (b, n_layer, H)
    return torch.cat(out)


@torch.no_grad()
def stretch_losses(model, x: torch.Tensor, y: torch.Tensor, make) -> torch.Tensor:
    """Decode ``x`` one id at a time through a fresh cache per layer; per-position losses.

    Shape:
        x, y: (B, N). Returns (B, N) float64.
    """
    caches = [make() for _ in range(model.config.n_layer)]
    losses = [
        F.cross_entropy(
            model(x[:, t : t + 1], caches=caches)[:, 0].double(), y[:, t], reduction="none"
        )
        for t in range(x.shape[1])
    ]  # N x (B,)
    return torch.stack(losses, dim=1)


@torch.no_grad()
def chunk_losses(
    model, x: torch.Tensor, y: torch.Tensor, make, batch_size: int = 64
) -> torch.Tensor:
    """Each window as one prompt chunk through fresh caches; per-position losses (N, T)."""
    out = []
    for i in range(0, len(x), batch_size):
        caches = [make() for _ in range(model.config.n_layer)]
        logits = model(x[i : i + batch_size], caches=caches)  # (b, T, V)
        out.append(
            F.cross_entropy(
                logits.transpose(1, 2).double(), y[i : i + batch_size], reduction="none"
            )
        )
    return torch.cat(out)


def excess_summary(e: torch.Tensor) -> dict:
    """Mean and standard error over windows of the sink excess, per layer and head."""
    se = e.std(0, unbiased=True) / len(e) ** 0.5
    return {
        "mean": [[round(v, 6) for v in r] for r in e.mean(0).tolist()],
        "se": [[round(v, 6) for v in r] for r in se.tolist()],
    }


def run(
    out: Path = DEFAULT_OUT,
    sizes: tuple[int, ...] = (16, 32),
    windows: tuple[int, ...] = (8, 16, 32),
    length_factor: int = 8,
) -> dict:
    t0 = time.perf_counter()
    n = NUM_SINK
    result: dict = {"schema": SCHEMA, "num_sink": n, "excess": {}, "excess_raw": {}, "learned": {}}
    for name in ("ch13_mha.pt", "ch13_gqa.pt", "ch13_mqa.pt", "ch13_mha_rope.pt"):
        ckpt = load_checkpoint(ROOT / "checkpoints" / name)
        model, T = ckpt.model.eval(), ckpt.config.context_length
        _, val_ids = ckpt.data()
        x, y = validation_windows(val_ids, T)
        result["val_windows"] = len(x)
        result["excess"][name] = excess_summary(sink_excess(model, x))
        result["excess_raw"][name] = excess_summary(sink_excess(model, x, relative=False))
        if name == "ch13_mha_rope.pt":
            continue
        full = chunk_losses(model, x, y, lambda T=T: SlidingWindowCache(T))  # W = T: causal
        r = {"full": round(full.mean().item(), 5)}
        for w in windows:
            plain = chunk_losses(model, x, y, lambda w=w: SlidingWindowCache(w))
            sinks = chunk_losses(model, x, y, lambda w=w: SlidingWindowCache(w, n))
            wider = chunk_losses(model, x, y, lambda w=w: SlidingWindowCache(w + n))
            r[f"W={w}"] = {
                "window": paired(plain, full),
                "sinks": paired(sinks, full),
                "wider": paired(wider, full),
                "sinks_minus_wider": paired(sinks, wider),
                "sinks_minus_window": paired(sinks, plain),
            }
        result["learned"][name] = r

    ckpt = load_checkpoint(ROOT / "checkpoints" / "ch13_mha_rope.pt")
    model, T = ckpt.model.eval(), ckpt.config.context_length
    attn = model.blocks[0].attn
    _, val_ids = ckpt.data()
    N = length_factor * T
    xs, ys = segments(val_ids, N, (len(val_ids) - 1) // N)
    rope = {"stretches": len(xs), "length": N, "context_length": T, "sizes": list(sizes)}
    for s in sizes:
        kinds = {
            "window": lambda s=s: SlidingWindowCache(s),
            "sinks_absolute": lambda s=s: SlidingWindowCache(s - n, n),
            "sinks_renumbered": lambda s=s: RenumberedSinkCache(
                s - n, n, rope=attn.rope, rope_base=attn.rope_base
            ),
        }
        past = {k: stretch_losses(model, xs, ys, make)[:, T:] for k, make in kinds.items()}
        rope[f"S={s}"] = {
            "past_loss": {k: round(v.mean().item(), 5) for k, v in past.items()},
            "absolute_minus_window": paired(past["sinks_absolute"], past["window"]),
            "renumbered_minus_window": paired(past["sinks_renumbered"], past["window"]),
            "renumbered_minus_absolute": paired(past["sinks_renumbered"], past["sinks_absolute"]),
        }
    result["rope"] = rope
    return write_result(result, out, t0)


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, DEFAULT_OUT, lambda args: run(args.out), argv)


if __name__ == "__main__":
    raise SystemExit(main())

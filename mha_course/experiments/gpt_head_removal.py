"""Chapter 13, measured: which heads of the trained GPT can go, and the loss gaps with intervals.

What chapter 13 §8–§10 print, computed here once (a few CPU-minutes on one thread) and written
to ``results/ch13_head_removal.json`` (stamped), which the notebook loads:

* **per-window losses** of MHA, GQA, MQA and the uptrained MHA→GQA model on *every*
  non-overlapping validation window (all 7 files, not the first 256 windows), per-file losses,
  and paired bootstrap intervals (``scipy.stats.bootstrap``, BCa, over windows) of each
  difference to MHA;
* **single-head removal**: the loss increase when one head is switched off, on 256 training
  windows spread evenly over the training text (what a pruner may look at) and on all
  validation windows (what it is judged on), each with a paired interval;
* **orders**: Michel et al.'s gradient score (normalised within each layer, as the paper does),
  the single-removal ranking, a greedy order re-scored after every removal (on the training
  windows), and random orders; each swept on all validation windows;
* **retraining after pruning** (the course's own control, not Michel et al.'s: they remove heads
  at test time and do not retrain): the greedy order's first 8 heads
  switched off, then a short run of the training recipe with the mask fixed, next to the same
  run on the unpruned model (the control: more training alone also moves the loss).

Run ``python -m mha_course.experiments.gpt_head_removal``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from mha_course.analysis.pruning import gradient_importance, mask_from_heads
from mha_course.experiments._common import run_main, write_result
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.config import TrainConfig
from mha_course.gpt.corpus import (
    SEPARATOR,
    STDLIB_FILES,
    VAL_EVERY,
    VAL_OFFSET,
    load_corpus,
    read_source,
    stdlib_root,
)
from mha_course.gpt.data import step_generator, training_batch, validation_windows, windows
from mha_course.gpt.model import lm_loss
from mha_course.gpt.train import make_optimizer

SCHEMA = "mha-course-gpt-head-removal/2"  # 2: "block_size" is now "context_length" (GPTConfig's T)
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch13_head_removal.json"
MODELS = {
    "MHA": "ch13_mha.pt",
    "GQA": "ch13_gqa.pt",
    "MQA": "ch13_mqa.pt",
    "MHA->GQA uptrained": "ch13_mha_to_gqa.pt",
}


def head_order(importance: torch.Tensor) -> list[tuple[int, int]]:
    """(layer, head) pairs, least important first (ties: lower index first).

    Shape: importance (n_layer, H) -> n_layer * H pairs.
    """
    H = importance.shape[1]
    return [(i // H, i % H) for i in torch.argsort(importance.flatten(), stable=True).tolist()]


def mask_after(order: list[tuple[int, int]], k: int, n_layer: int, H: int) -> torch.Tensor:
    """(n_layer, H) head mask with the first ``k`` heads of ``order`` switched off."""
    heads: dict[int, list[int]] = {}
    for layer, h in order[:k]:
        heads.setdefault(layer, []).append(h)
    return mask_from_heads(heads, n_layer, H)


@torch.no_grad()
def token_losses(
    model, x: torch.Tensor, y: torch.Tensor, head_mask=None, batch_size: int = 64
) -> torch.Tensor:
    """Per-position next-token losses (nats).

    Shape:
        x, y: (N, T). Returns (N, T) float64.
    """
    model.eval()
    out = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size], head_mask=head_mask)  # (b, T, V)
        out.append(
            F.cross_entropy(
                logits.transpose(1, 2), y[i : i + batch_size], reduction="none"
            ).double()
        )  # (b, V, T) vs (b, T) -> (b, T)
    return torch.cat(out)


def spread_windows(data: torch.Tensor, T: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` windows whose starts are spaced evenly over the whole of ``data``."""
    starts = torch.linspace(0, len(data) - T - 2, n).round().long()  # (n,)
    return windows(data, starts, T)


def interval(values: np.ndarray, seed: int = 0) -> list[float]:
    """95 % BCa bootstrap interval of the mean of ``values`` (one value per window)."""
    res = stats.bootstrap(
        (values,),
        np.mean,
        confidence_level=0.95,
        n_resamples=4000,
        method="BCa",
        random_state=np.random.default_rng(seed),
    )
    return [
        round(float(res.confidence_interval.low), 5),
        round(float(res.confidence_interval.high), 5),
    ]


def paired(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Mean of ``a - b`` over windows (rows: windows), its standard error and 95 % interval."""
    d = (a.mean(1) - b.mean(1)).numpy()
    return {
        "mean": round(float(d.mean()), 5),
        "se": round(float(d.std(ddof=1) / len(d) ** 0.5), 5),
        "ci95": interval(d),
    }


def val_file_spans(corpus) -> list[tuple[str, int, int]]:
    """(file, first character, end) of each validation file in the validation text; the
    separator after a file counts as that file's."""
    names = [f for i, f in enumerate(STDLIB_FILES) if i % VAL_EVERY == VAL_OFFSET]
    spans, pos = [], 0
    for name in names:
        n = len(read_source(stdlib_root() / name)) + len(SEPARATOR)
        spans.append((name, pos, pos + n))
        pos += n
    return spans


def greedy_order(model, x, y, L: int, H: int) -> tuple[list[tuple[int, int]], list[float]]:
    """Remove, one at a time, the head whose removal raises the loss on (x, y) least; re-score
    after each removal. Returns the order and the loss after each removal."""
    mask, order, losses = torch.ones(L, H), [], []
    for _ in range(L * H - 1):
        best = None
        for layer in range(L):
            for h in range(H):
                if mask[layer, h] == 0:
                    continue
                trial = mask.clone()
                trial[layer, h] = 0
                loss = token_losses(model, x, y, trial).mean().item()
                if best is None or loss < best[0]:
                    best = (loss, layer, h)
        mask[best[1], best[2]] = 0
        order.append((best[1], best[2]))
        losses.append(round(best[0], 5))
    remaining = [(i, j) for i in range(L) for j in range(H) if mask[i, j] == 1]
    return order + remaining, losses


def retrain(model, train_ids, T: int, mask: torch.Tensor, steps: int, lr: float, seed: int):
    """``steps`` AdamW steps (the recipe's batch 12, constant ``lr``) with ``mask`` fixed."""
    tc = TrainConfig(learning_rate=lr)
    model.train()
    opt = make_optimizer(model, tc)
    for s in range(steps):
        x, y = training_batch(train_ids, T, tc.batch_size, seed=seed, step=s)
        loss = lm_loss(model(x, head_mask=mask), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
    model.eval()
    return model


def run(
    out: Path = DEFAULT_OUT,
    train_windows: int = 256,
    random_orders: int = 5,
    retrain_steps: int = 200,
    retrain_lr: float = 3e-4,
    retrain_heads: int = 8,
) -> dict:
    t0 = time.perf_counter()
    torch.manual_seed(0)
    corpus = load_corpus()
    ckpts = {name: load_checkpoint(ROOT / "checkpoints" / f) for name, f in MODELS.items()}
    mha = ckpts["MHA"]
    model, cfg = mha.model, mha.config
    train_ids, val_ids = mha.data(corpus)
    L, H, T = cfg.n_layer, cfg.n_head, cfg.context_length
    xv, yv = validation_windows(val_ids, T)  # every non-overlapping window: (593, T)
    xt, yt = spread_windows(train_ids, T, train_windows)
    full = torch.ones(L, H)

    per_model = {name: token_losses(c.model, xv, yv) for name, c in ckpts.items()}
    base_v, base_t = per_model["MHA"], token_losses(model, xt, yt)
    spans = val_file_spans(corpus)
    pos = torch.arange(len(xv))[:, None] * T + torch.arange(T) + 1  # target's character index
    per_file = {}
    for name, a, b in spans:
        sel = (pos >= a) & (pos < b)
        per_file[name] = {
            "chars": int(sel.sum()),
            **{m: round(v[sel].mean().item(), 4) for m, v in per_model.items()},
        }

    single_t, single_v = [], []
    for layer in range(L):
        for h in range(H):
            m = full.clone()
            m[layer, h] = 0
            single_t.append(paired(token_losses(model, xt, yt, m), base_t))
            single_v.append(paired(token_losses(model, xv, yv, m), base_v))

    def grid(rows: list[dict]) -> list[list[float]]:
        return [[rows[i * H + j]["mean"] for j in range(H)] for i in range(L)]

    batches = [training_batch(train_ids, T, 16, seed=99, step=s) for s in range(4)]
    importance = gradient_importance(model, batches, lm_loss)
    by_single = head_order(torch.tensor(grid(single_t)))
    greedy, greedy_train = greedy_order(model, xt, yt, L, H)
    orders = {"importance": head_order(importance), "single_removal": by_single, "greedy": greedy}
    for s in range(random_orders):
        perm = torch.randperm(L * H, generator=step_generator(s, 0)).tolist()
        orders[f"random_{s}"] = [(i // H, i % H) for i in perm]
    curves, level_ci = {}, {}
    for name, order in orders.items():
        curve = [round(base_v.mean().item(), 5)]
        for k in range(1, L * H):
            lv = token_losses(model, xv, yv, mask_after(order, k, L, H))
            curve.append(round(lv.mean().item(), 5))
            if name == "greedy":
                level_ci[k] = paired(lv, base_v)
        curves[name] = curve

    mask = mask_after(greedy, retrain_heads, L, H)
    pruned = retrain(
        load_checkpoint(ROOT / "checkpoints" / MODELS["MHA"]).model,
        train_ids,
        T,
        mask,
        retrain_steps,
        retrain_lr,
        seed=7,
    )
    control = retrain(
        load_checkpoint(ROOT / "checkpoints" / MODELS["MHA"]).model,
        train_ids,
        T,
        full,
        retrain_steps,
        retrain_lr,
        seed=7,
    )
    lp, lc = token_losses(pruned, xv, yv, mask), token_losses(control, xv, yv)
    l_before = token_losses(model, xv, yv, mask)
    retraining = {
        "heads_removed": retrain_heads,
        "order": "greedy",
        "steps": retrain_steps,
        "lr": retrain_lr,
        "batch_size": 12,
        "seed": 7,
        "pruned_before": round(l_before.mean().item(), 5),
        "pruned_after": round(lp.mean().item(), 5),
        "control_after": round(lc.mean().item(), 5),
        "pruned_after_minus_mha": paired(lp, base_v),
        "pruned_after_minus_control": paired(lp, lc),
        "control_minus_mha": paired(lc, base_v),
    }

    result = {
        "schema": SCHEMA,
        "val_windows": len(xv),
        "val_chars": int(yv.numel()),
        "train_windows": train_windows,
        "context_length": T,
        "val_loss": {m: round(v.mean().item(), 5) for m, v in per_model.items()},
        "val_loss_ci95": {m: interval(v.mean(1).numpy()) for m, v in per_model.items()},
        "minus_mha": {m: paired(v, base_v) for m, v in per_model.items() if m != "MHA"},
        "train_loss_mha": round(base_t.mean().item(), 5),
        "train_loss_mha_ci95": interval(base_t.mean(1).numpy()),
        "per_file": per_file,
        "single_removal_train": single_t,
        "single_removal_val": single_v,
        "importance": [[round(v, 6) for v in row] for row in importance.tolist()],
        "orders": {k: [list(p) for p in v] for k, v in orders.items()},
        "greedy_train_losses": greedy_train,
        "curves": curves,
        "greedy_level_minus_mha": level_ci,
        "retraining": retraining,
    }
    return write_result(result, out, t0)


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, DEFAULT_OUT, lambda args: run(args.out), argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Chapter 13: head pruning on the trained GPT — validation loss vs heads removed.

Chapter 10's recipe on a model trained on real text: score every head with
:func:`mha_course.gradient_importance` (Michel et al.; on training windows), switch heads off
in that order (least important first) through ``head_mask``, and compare with random orders
(several seeds: a band). At one level the physically pruned model
(:func:`mha_course.prune_model_heads`) is checked against the masked one.

Run ``python -m mha_course.experiments.gpt_pruning`` (a few minutes on one CPU thread); it
writes ``results/ch13_pruning.json`` (stamped). It evaluates on the first 256 validation windows
only; notebook 13 now loads :mod:`mha_course.experiments.gpt_head_removal`'s results (all windows,
single-head removal, a greedy order, retraining), which reuses this module's ordering helpers.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..gpt.checkpoint import load_checkpoint
from ..gpt.data import step_generator, training_batch
from ..gpt.evaluate import evaluate
from ..gpt.model import lm_loss
from ..pruning import count_parameters, gradient_importance, mask_from_heads, prune_model_heads
from ._common import run_main, write_result

SCHEMA = "mha-course-gpt-pruning/1"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch13_pruning.json"
DEFAULT_CKPT = ROOT / "checkpoints" / "ch13_mha.pt"


def head_order(importance: torch.Tensor) -> list[tuple[int, int]]:
    """(layer, head) pairs, least important first (ties: lower index first)."""
    H = importance.shape[1]
    return [(i // H, i % H) for i in torch.argsort(importance.flatten(), stable=True).tolist()]


def mask_after(order: list[tuple[int, int]], k: int, n_layer: int, H: int) -> torch.Tensor:
    """(n_layer, H) head mask with the first ``k`` heads of ``order`` switched off."""
    heads: dict[int, list[int]] = {}
    for layer, h in order[:k]:
        heads.setdefault(layer, []).append(h)
    return mask_from_heads(heads, n_layer, H)


def run(checkpoint: Path = DEFAULT_CKPT, out: Path = DEFAULT_OUT, eval_windows: int = 256,
        importance_batches: int = 4, seeds: tuple[int, ...] = tuple(range(10))) -> dict:
    t0 = time.perf_counter()
    torch.manual_seed(0)
    ckpt = load_checkpoint(checkpoint)
    model, cfg = ckpt.model, ckpt.config
    train_ids, val_ids = ckpt.data()
    L, H, T = cfg.n_layer, cfg.n_head, cfg.block_size
    batches = [training_batch(train_ids, T, 16, seed=99, step=s) for s in range(importance_batches)]
    importance = gradient_importance(model, batches, lm_loss)  # (n_layer, H)
    n = L * H
    attn_params_per_head = 4 * cfg.head_dim * cfg.n_embd  # W_Q rows, W_K, W_V rows (MHA), W_O cols
    total_params = model.num_parameters()
    attn_params = sum(count_parameters(b.attn) for b in model.blocks)

    def curve(order):
        return [round(evaluate(model, val_ids, T, max_windows=eval_windows,
                               head_mask=mask_after(order, k, L, H)), 5) for k in range(n)]

    orders = {"importance": head_order(importance)}
    for s in seeds:
        perm = torch.randperm(n, generator=step_generator(s, 0)).tolist()
        orders[f"random_{s}"] = [(i // H, i % H) for i in perm]
    curves = {name: curve(order) for name, order in orders.items()}

    # physically pruned == masked, at the largest k where every layer keeps a head
    imp = orders["importance"]
    k_phys = max(k for k in range(n) if all(
        sum(1 for layer, _ in imp[:k] if layer == i) < H for i in range(L)))
    heads: dict[int, list[int]] = {}
    for layer, h in imp[:k_phys]:
        heads.setdefault(layer, []).append(h)
    pruned = prune_model_heads(model, heads).double()
    masked = model.double()
    x, _ = training_batch(val_ids, T, 8, seed=5, step=0)
    with torch.no_grad():
        diff = (pruned(x) - masked(x, head_mask=mask_after(imp, k_phys, L, H).double())).abs().max()
    result = {
        "schema": SCHEMA, "checkpoint": checkpoint.name, "eval_windows": eval_windows,
        "eval_chars": eval_windows * T, "importance_batches": importance_batches,
        "importance": [[round(v, 6) for v in row] for row in importance.tolist()],
        "orders": {k: [list(p) for p in v] for k, v in orders.items()},
        "heads_removed": list(range(n)), "curves": curves,
        "attention_params": attn_params, "attention_params_per_head": attn_params_per_head,
        "total_params": total_params,
        "physical": {"heads_removed": k_phys, "max_abs_logit_diff_float64": float(diff),
                     "params_after": count_parameters(pruned), "params_before": total_params},
    }
    return write_result(result, out, t0)


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, DEFAULT_OUT, lambda args: run(args.checkpoint, args.out), argv,
                    arguments=[("--checkpoint", {"type": Path, "default": DEFAULT_CKPT})])


if __name__ == "__main__":
    raise SystemExit(main())

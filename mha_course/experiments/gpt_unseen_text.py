"""Chapter 13 §5, measured: how much of the train/validation gap is *unseen text* and how much is
*unseen modules*.

The recipe's 2,000 steps draw 24,000 random windows from the training text, and a batch depends
only on ``(seed, step)`` (:func:`~mha_course.gpt.data.training_batch`), so which characters
training touched can be replayed exactly. Stretches of the training files that no training
window overlapped (input or target) were **never trained on**: a held-out slice of the training
modules, with no retraining. Three groups of windows of the shipped MHA model, per window:

* **trained on**: the windows of 50 training steps spread over the run, as training drew them;
* **never trained on**: non-overlapping windows inside the untouched stretches of the training
  files (the modules were seen, these characters were not);
* **validation**: every non-overlapping window of the 7 validation files (modules never seen).

Intervals are BCa bootstraps over windows (``scipy.stats.bootstrap``; for a difference, the two
groups resampled independently). They capture window-to-window noise only: not the file-to-file
spread, nor another training seed.

Run ``python -m mha_course.experiments.gpt_unseen_text`` (a few minutes on one thread); it writes
``results/ch13_unseen_text.json`` (stamped), which the notebook loads.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from mha_course.benchmark.stamp import environment_stamp
from mha_course.experiments.gpt_head_removal import interval, token_losses
from mha_course.experiments.results_file import read_results
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.corpus import load_corpus
from mha_course.gpt.data import batch_starts, step_generator, windows

SCHEMA = "mha-course-gpt-unseen-text/2"  # 2: "block_size" is now "context_length" (GPTConfig's T)
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch13_unseen_text.json"


def training_starts(
    n_tokens: int, context_length: int, batch_size: int, seed: int, steps: range
) -> torch.Tensor:
    """The window starts training drew at ``steps`` (the same calls as ``training_batch``).

    Shape:
        Returns (len(steps), batch_size) int64.
    """
    return torch.stack(
        [batch_starts(n_tokens, context_length, batch_size, step_generator(seed, s)) for s in steps]
    )


def trained_targets(n_tokens: int, starts: torch.Tensor, context_length: int) -> torch.Tensor:
    """True at every id that some training window was scored on as a target
    (ids ``start + 1 … start + T``).

    Shape:
        starts: any shape. Returns (n_tokens,) bool.
    """
    delta = torch.zeros(n_tokens + 1, dtype=torch.int64)
    flat = starts.flatten()
    delta.index_add_(0, flat + 1, torch.ones_like(flat))
    delta.index_add_(0, flat + context_length + 1, -torch.ones_like(flat))
    return delta.cumsum(0)[:n_tokens] > 0  # (n_tokens + 1,) -> (n_tokens,)


def runs(ids: torch.Tensor) -> torch.Tensor:
    """Which run of consecutive ids each of the increasing ``ids`` belongs to (0, 1, ...).

    Shape:
        ids: (N,). Returns (N,) int64.
    """
    return torch.cat([torch.zeros(1, dtype=torch.int64), (ids.diff() > 1).long()]).cumsum(0)


@torch.no_grad()
def last_position_losses(model, data: torch.Tensor, targets: torch.Tensor, T: int) -> np.ndarray:
    """The loss on each target id ``j``, predicted from the ``T`` ids before it (the last position
    of the window that starts at ``j - T``): every group is scored with the same full context.

    Shape:
        targets: (N,) with every j >= T. Returns (N,) float64.
    """
    x, y = windows(data, targets - T, T)  # y[:, -1] = data[j]
    return token_losses(model, x, y)[:, -1].numpy()


def _difference(a: np.ndarray, b: np.ndarray) -> dict:
    """mean(a) - mean(b) for two independent samples, with its 95 % BCa interval."""
    res = stats.bootstrap(
        (a, b),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        confidence_level=0.95,
        n_resamples=4000,
        method="BCa",
        random_state=np.random.default_rng(0),
    )
    ci = res.confidence_interval
    return {
        "mean": round(float(a.mean() - b.mean()), 5),
        "ci95": [round(float(ci.low), 5), round(float(ci.high), 5)],
    }


def run(out: Path = DEFAULT_OUT, checkpoint: str = "ch13_mha.pt", sample: int = 2000) -> dict:
    start = time.perf_counter()
    ckpt = load_checkpoint(ROOT / "checkpoints" / checkpoint)
    train_ids, val_ids = ckpt.data(load_corpus())
    tc, T = ckpt.train_config, ckpt.config.context_length
    every = training_starts(len(train_ids), T, tc.batch_size, tc.seed, range(tc.max_iters))
    trained = trained_targets(len(train_ids), every, T)
    trained[:T] = True  # targets need T ids of context before them: leave the first T out
    never = (~trained).nonzero().flatten()  # (N_never,) increasing
    g = torch.Generator().manual_seed(0)
    seen = trained.nonzero().flatten()[T:]  # ids >= T that training scored
    seen = seen[torch.randperm(len(seen), generator=g)[:sample]]
    val = torch.randperm(len(val_ids) - T, generator=g)[:sample] + T
    loss_never = last_position_losses(ckpt.model, train_ids, never, T)
    run_of = runs(never).numpy()
    # one unit per untouched stretch: neighbouring targets share context, stretches do not
    per_run = np.array([loss_never[run_of == r].mean() for r in range(run_of.max() + 1)])
    loss = {
        "trained on": last_position_losses(ckpt.model, train_ids, seen, T),
        "never trained on (stretch means)": per_run,
        "validation": last_position_losses(ckpt.model, val_ids, val, T),
    }
    unit = {
        "trained on": "targets",
        "never trained on (stretch means)": "stretches",
        "validation": "targets",
    }
    result = {
        "schema": SCHEMA,
        "checkpoint": checkpoint,
        "context_length": T,
        "training_windows_drawn": int(every.numel()),
        "train_chars": len(train_ids),
        "never_trained_targets": len(never),
        "never_trained_stretches": len(per_run),
        "never_trained_target_mean": round(float(loss_never.mean()), 5),
        "units": {k: f"{len(v)} {unit[k]}" for k, v in loss.items()},
        "loss": {k: round(float(v.mean()), 5) for k, v in loss.items()},
        "ci95": {k: interval(v) for k, v in loss.items()},
        "never_minus_trained": _difference(per_run, loss["trained on"]),
        "validation_minus_never": _difference(loss["validation"], per_run),
        "validation_minus_trained": _difference(loss["validation"], loss["trained on"]),
        "stamp": environment_stamp("cpu"),
        "wall_time_s": round(time.perf_counter() - start, 1),
        "command": "python -m mha_course.experiments.gpt_unseen_text",
    }
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def load_results(path: Path = DEFAULT_OUT) -> dict:
    return read_results(path, SCHEMA)


def report(r: dict) -> str:
    """The lines chapter 13 prints for result ``r``: how much training text was never a target,
    each loss with its 95 % interval, and the two differences."""
    frac = r["never_trained_targets"] / r["train_chars"]
    lines = [
        f"{r['training_windows_drawn']:,} training windows on {r['train_chars']:,} training "
        f"characters: {r['never_trained_targets']:,} ({frac:.1%}) never a target, in "
        f"{r['never_trained_stretches']} stretches ({r['wall_time_s'] / 60:.1f} min wall to "
        "replay and score)"
    ]
    for k, v in r["loss"].items():
        lo, hi = r["ci95"][k]
        lines.append(f"{k:>32}: {v:.3f} nats/char [{lo:.3f}, {hi:.3f}] over {r['units'][k]}")
    for k in ("never_minus_trained", "validation_minus_never"):
        d = r[k]
        lines.append(
            f"{k.replace('_', ' '):>32}: {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    r = run(args.out)
    print(
        f"wrote {args.out} in {r['wall_time_s']} s: "
        + ", ".join(f"{k} {v:.4f} ({r['units'][k]})" for k, v in r["loss"].items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

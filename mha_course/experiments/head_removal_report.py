"""Chapter 13's head-removal evidence, read back from ``results/ch13_head_removal.json``
(:mod:`mha_course.experiments.gpt_head_removal`): the loss table per validation file, how many
heads each removal order takes out within a perplexity budget, and the retraining's paired
intervals — so that the lecture's evidence cells hold only the claim, the measurement and its
assertion (issue 32: bookkeeping moved into the experiment modules).
"""

from __future__ import annotations

import math

import torch

ORDERS = ("importance", "single_removal", "greedy")  # the measured and scored removal orders


def _curves(hr: dict) -> tuple[dict[str, list[float]], torch.Tensor]:
    """The named orders' validation-loss curves, and the random orders' stacked (R, heads + 1)."""
    rand = torch.tensor([v for k, v in hr["curves"].items() if k.startswith("random")])
    return {k: hr["curves"][k] for k in ORDERS}, rand


def most_removed(curve: list[float], base: float, tolerance: float) -> int:
    """The most heads removed (in the curve's order) with perplexity within ``+tolerance`` of
    ``exp(base)``: the largest i with exp(curve[i] − base) − 1 ≤ tolerance."""
    if tolerance < 0:
        raise ValueError(f"tolerance: expected a share >= 0 (0.05 for +5 %); got {tolerance}")
    return max(i for i, v in enumerate(curve) if math.exp(v - base) - 1 <= tolerance)


def heads_within(hr: dict, tolerance: float) -> dict[str, int]:
    """Per order (and the random orders' median curve): :func:`most_removed` from the unpruned loss."""
    named, rand = _curves(hr)
    base = named["greedy"][0]
    counts = {k: most_removed(v, base, tolerance) for k, v in named.items()}
    counts["random median"] = most_removed(rand.median(0).values.tolist(), base, tolerance)
    return counts


def pruning_text(hr: dict, tolerances: tuple[float, ...] = (0.01, 0.05, 0.10)) -> str:
    """The heads each order removes within each perplexity budget, how often greedy is below the
    importance order and the best random order, and the retraining with its paired intervals."""
    named, rand = _curves(hr)
    lines = []
    for tol in tolerances:
        counts = heads_within(hr, tol)
        lines.append(
            f"perplexity within +{tol:.0%}: heads removed "
            + ", ".join(f"{n} {v}" for n, v in counts.items())
        )
    g, imp = torch.tensor(named["greedy"]), torch.tensor(named["importance"])
    n = len(g) - 1
    lines.append(
        f"greedy below the importance order at {int((g[1:] < imp[1:]).sum())} of {n} levels, "
        f"below the best random order at {int((g[1:] <= rand.min(0).values[1:]).sum())}"
    )
    rt = hr["retraining"]
    lines += [
        "",
        f"retraining: {rt['heads_removed']} heads off (greedy order), {rt['steps']} steps at lr "
        f"{rt['lr']}: {rt['pruned_before']:.4f} -> {rt['pruned_after']:.4f} nats/char; the "
        f"unpruned model after the same steps: {rt['control_after']:.4f}",
    ]
    for key in ("pruned_after_minus_mha", "pruned_after_minus_control", "control_minus_mha"):
        d = rt[key]
        lines.append(
            f"  {key.replace('_', ' ')}: {d['mean']:+.4f} [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]"
        )
    return "\n".join(lines)


def loss_table(hr: dict) -> str:
    """The MHA model's loss on training and on all validation windows (95 % intervals), per file."""
    lo, hi = hr["train_loss_mha_ci95"]
    vlo, vhi = hr["val_loss_ci95"]["MHA"]
    lines = [
        f"MHA on {hr['train_windows']} training windows spread over all training text (eval mode): "
        f"{hr['train_loss_mha']:.3f} nats/char, 95% interval over windows [{lo:.3f}, {hi:.3f}]",
        f"MHA on all {hr['val_windows']} validation windows ({hr['val_chars']:,} scored "
        f"characters): {hr['val_loss']['MHA']:.4f}, [{vlo:.3f}, {vhi:.3f}]",
        "",
        "per validation file (MHA):",
    ]
    for f, r in hr["per_file"].items():
        lines.append(f"{f:>34} {r['chars']:>6,} characters {r['MHA']:6.3f} nats/char")
    return "\n".join(lines)


def curve_windows(hr: dict, windows: int = 240) -> tuple[int, list[int], float]:
    """Where the training curve's first ``windows`` validation windows end: their characters,
    the cumulative characters at the end of each validation file, and the share of the file
    they end in that they cover."""
    chars = torch.tensor([r["chars"] for r in hr["per_file"].values()])
    ends, first = chars.cumsum(0), windows * hr["context_length"]
    i = int((ends < first).sum())  # the file the windows end in
    start = ends[i - 1].item() if i else 0
    return first, ends.tolist(), (first - start) / chars[i].item()

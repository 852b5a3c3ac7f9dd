"""Chapter 13's induction evidence, read back from ``results/ch13_induction.json``
(:mod:`mha_course.experiments.induction_formation`): each seed's phase change, the summary the
lecture asserts on, and the ablation's paired intervals — so that the lecture's evidence cells hold
only the claim, the measurement and its assertion (issue 32: bookkeeping moved into the
experiment modules).
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.analysis.stats import Interval, k_of_n, paired_diff_ci
from mha_course.experiments.induction_formation import crossing_step, phase_change


def phases(ind: dict) -> dict[str, dict]:
    """Per seed: :func:`phase_change` of its curve, plus ``fall``, the steps at which its
    second-copy loss has gone 25 % and 75 % of the way down."""
    out = {}
    for seed, c in ind["curves"].items():
        fall = [
            crossing_step(c["step"], c["loss_second"], rising=False, fraction=f)
            for f in (0.25, 0.75)
        ]
        out[seed] = {**phase_change(c), "fall": fall}
    return out


def phase_table(ind: dict) -> str:
    """One row per seed: the half-way steps, the two heads, the final losses, the fall's span."""
    lines = [
        f"{'seed':>4} {'loss half-way':>13} {'induction half-way':>18} {'previous half-way':>17} "
        f"{'heads':>10} {'1st copy':>8} {'2nd copy':>8} {'25->75 % of the fall':>21}"
    ]
    for seed, p in phases(ind).items():
        c = ind["curves"][seed]
        lines.append(
            f"{seed:>4} {p['loss_step']:>13} {p['induction_step']:>18} {p['previous_step']:>17} "
            f"{p['previous_head'] + '->' + p['induction_head']:>10} {c['loss_first'][-1]:8.3f} "
            f"{c['loss_second'][-1]:8.3f} {p['fall'][0]:>10} -> {p['fall'][1]}"
        )
    return "\n".join(lines)


def formation_summary(ind: dict) -> dict:
    """What the lecture asserts about the seeds, each as a plain number or list:

    ``together`` / ``prev_first`` (one bool per seed: loss and induction score half-way within one
    evaluation; the previous-token head half-way 0 … 3 evaluations before), ``spans`` (steps from
    25 % to 75 % of the fall), ``quarter_step`` (the earliest 25 % step), ``first_copy_min`` (the
    lowest first-copy loss of any evaluation), ``final_first`` / ``final_second`` (the range of the
    final losses), ``start_ratio`` (the best untrained head over a uniform head), ``layer0_ratio``
    (the best trained layer-0 induction score over uniform), ``layer1_min`` (the lowest trained
    layer-1 induction score), and ``phases`` (:func:`phases`).
    """
    u, every, curves = ind["uniform_induction"], ind["config"]["eval_every"], ind["curves"]
    ph = phases(ind)
    final = [torch.tensor(c["induction"][-1]) for c in curves.values()]  # (layers, H) each
    return {
        "phases": ph,
        "together": [abs(p["loss_step"] - p["induction_step"]) <= every for p in ph.values()],
        "prev_first": [
            0 <= p["induction_step"] - p["previous_step"] <= 3 * every for p in ph.values()
        ],
        "spans": [p["fall"][1] - p["fall"][0] for p in ph.values()],
        "quarter_step": min(p["fall"][0] for p in ph.values()),
        "first_copy_min": min(min(c["loss_first"]) for c in curves.values()),
        "final_first": [f(c["loss_first"][-1] for c in curves.values()) for f in (min, max)],
        "final_second": [f(c["loss_second"][-1] for c in curves.values()) for f in (min, max)],
        "start_ratio": max(torch.tensor(c["induction"][0]).max().item() for c in curves.values())
        / u,
        "layer0_ratio": max(f[0].max().item() for f in final) / u,
        "layer1_min": min(f[1].min().item() for f in final),
    }


def formation_text(ind: dict, s: dict) -> str:
    """The lines the lecture prints for :func:`formation_summary` ``s``."""
    u, every = ind["uniform_induction"], ind["config"]["eval_every"]
    return "\n".join(
        [
            f"induction score and second-copy loss half-way within {every} steps (one evaluation): "
            f"{k_of_n(s['together'])} seeds",
            f"layer-0 previous-token head half-way 0-{3 * every} steps before the induction head: "
            f"{k_of_n(s['prev_first'])} seeds",
            f"the second-copy loss: a quarter of its fall at step {s['quarter_step']} or later; "
            f"the middle half (25 % -> 75 %) takes {min(s['spans'])}-{max(s['spans'])} of "
            f"{ind['config']['steps']:,} steps",
            f"first copy, lowest loss of any evaluation: {s['first_copy_min']:.3f}",
            f"final loss, first copy {s['final_first'][0]:.2f}-{s['final_first'][1]:.2f} "
            f"(ln V = {ind['ln_vocab']:.2f}); second copy {s['final_second'][0]:.2f}-"
            f"{s['final_second'][1]:.2f} nats",
            f"controls (uniform head: {u:.3f}): untrained, the best head scores at most "
            f"{s['start_ratio']:.2f}x uniform; trained, the layer-0 heads at most "
            f"{s['layer0_ratio']:.1f}x; every layer-1 head at least {s['layer1_min']:.2f} = "
            f"{s['layer1_min'] / u:.0f}x",
        ]
    )


def ablation(ind: dict) -> dict[str, dict]:
    """Per seed, the second-copy loss with one layer-0 head off minus all heads on, paired over
    the evaluation sequences: ``previous`` (the head with the highest final previous-token
    score), ``control`` (the lowest), ``other_high`` (the highest upper end among the other
    layer-0 heads), their indices, ``on`` (the mean loss, every head on) and ``n`` (sequences)."""
    out = {}
    for seed, c in ind["curves"].items():
        ab, prev = (
            c["ablation"],
            c["previous"][-1][0],
        )  # final previous-token score per layer-0 head
        on = np.array(ab["none"])  # (B,) second-copy loss per sequence, every head on
        top, low = int(np.argmax(prev)), int(np.argmin(prev))
        d: dict[int, Interval] = {
            h: paired_diff_ci(np.array(ab[f"L0H{h}"]), on) for h in range(len(prev))
        }
        out[seed] = {
            "previous": d[top],
            "control": d[low],
            "other_high": max(d[h].high for h in d if h != top),
            "top": top,
            "low": low,
            "on": float(on.mean()),
            "n": len(on),
        }
    return out


def ablation_text(ind: dict, ab: dict[str, dict]) -> str:
    """The lines the lecture prints for :func:`ablation` ``ab``."""

    def ci(x: Interval) -> str:
        return f"{x.estimate:+.2f} [{x.low:+.2f}, {x.high:+.2f}]"

    lines = [
        f"seed {seed}: all heads on {a['on']:.2f} nats | previous-token head L0H{a['top']} off "
        f"{ci(a['previous'])} | control L0H{a['low']} off {ci(a['control'])} | any other layer-0 "
        f"head <= {a['other_high']:+.2f}"
        for seed, a in ab.items()
    ]
    n = next(iter(ab.values()))["n"]
    return "\n".join([*lines, f"over {n} sequences per seed; ln V = {ind['ln_vocab']:.2f}"])

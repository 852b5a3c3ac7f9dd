"""Chapter 14's evidence, read back: the tables of ``results/ch14_sinks.json`` (sinks on the
trained models, :mod:`mha_course.experiments.sink_distance`) and ``results/ch14_long_context.json``
(decoding past the training context, :mod:`mha_course.experiments.long_context`), so that the
lecture's evidence cells hold only the claim, the measurement and its assertion (issue 32:
bookkeeping moved into the experiment modules).

Every difference in ``ch14_sinks.json`` is paired per validation window or stretch: a dict of
``mean``, ``se`` (standard error) and ``ci95`` (95 % BCa bootstrap interval).
"""

from __future__ import annotations

from pathlib import Path

import torch

from mha_course.experiments import long_context, sink_distance
from mha_course.experiments.results_file import read_results


def load_sinks(path: str | Path = sink_distance.DEFAULT_OUT) -> dict:
    """``results/ch14_sinks.json`` (or ``path``); a ValueError when its schema is not sink_distance's."""
    return read_results(path, sink_distance.SCHEMA)


def load_long_context(path: str | Path = long_context.DEFAULT_OUT) -> dict:
    """``results/ch14_long_context.json`` (or ``path``); a ValueError when its schema is not
    long_context's."""
    return read_results(path, long_context.SCHEMA)


def pm(d: dict) -> str:
    """A paired difference as ``+mean ± standard error``."""
    return f"{d['mean']:+.4f} ± {d['se']:.4f}"


def across_models(sinks: dict, window: int, name: str) -> list[dict]:
    """The paired difference ``name`` at window ``window`` on each learned-position model:
    ``window``, ``sinks``, ``wider`` (each above the full cache), ``sinks_minus_window`` or
    ``sinks_minus_wider``."""
    out = []
    for model, r in sinks["learned"].items():
        if f"W={window}" not in r or name not in r[f"W={window}"]:
            raise ValueError(
                f"window, name: expected a window and difference of {model} in the file, e.g. "
                f"8 and 'sinks_minus_wider'; got {window}, {name!r}"
            )
        out.append(r[f"W={window}"][name])
    return out


def window_table(sinks: dict) -> str:
    """Section 6: each window, window + sinks and wider window against the full cache, per model."""
    n = sinks["num_sink"]
    lines = [
        f"stamp: {sinks['stamp']['date_utc'][:10]} | torch {sinks['stamp']['torch']} | "
        f"{sinks['val_windows']} validation windows of 64 characters (all of validation); "
        f"{sinks['wall_time_s'] / 60:.1f} min wall; nats/char"
    ]
    for name, r in sinks["learned"].items():
        lines += ["", f"{name}: full cache {r['full']:.4f}; above it:"]
        for w in sorted(int(k[2:]) for k in r if k.startswith("W=")):
            c = r[f"W={w}"]
            lines += [
                f"  W={w:2d} {pm(c['window'])} | W={w} + {n} sinks {pm(c['sinks'])} | "
                f"W={w + n} {pm(c['wider'])}",
                f"        sinks - W={w}: {pm(c['sinks_minus_window'])} | sinks - W={w + n}: "
                f"{pm(c['sinks_minus_wider'])}, 95% CI {c['sinks_minus_wider']['ci95']}",
            ]
    return "\n".join(lines)


def excess_bounds(sinks: dict) -> dict[str, dict[str, float]]:
    """Per model, over its heads (token 0 against a key at the same distance): ``relative_top``
    and ``raw_top``, the largest mean + 2 SE relative to the uniform share and raw, and
    ``raw_bottom``, the smallest raw mean − 2 SE."""
    out = {}
    for name in sinks["excess"]:
        rel, raw = sinks["excess"][name], sinks["excess_raw"][name]
        rel_mean, rel_se = torch.tensor(rel["mean"]), torch.tensor(rel["se"])  # (n_layer, H)
        raw_mean, raw_se = torch.tensor(raw["mean"]), torch.tensor(raw["se"])  # (n_layer, H)
        out[name] = {
            "relative_top": (rel_mean + 2 * rel_se).max().item(),
            "raw_top": (raw_mean + 2 * raw_se).max().item(),
            "raw_bottom": (raw_mean - 2 * raw_se).min().item(),
        }
    return out


def excess_table(sinks: dict) -> str:
    """Section 6: the range of each model's sink excess over its heads, raw and relative."""
    bounds, lines = excess_bounds(sinks), []
    for key, top in (("excess_raw", "raw_top"), ("excess", "relative_top")):
        for name, r in sinks[key].items():
            mean = torch.tensor(r["mean"])  # (n_layer, H)
            lines.append(
                f"{key:10s} {name:17s} excess from {mean.min():+.3f} to {mean.max():+.3f}; "
                f"largest mean + 2 SE over the 16 heads {bounds[name][top]:+.3f}"
            )
    return "\n".join(lines)


def long_context_table(lc: dict) -> str:
    """Section 7: each cache's loss inside and past the training context."""
    lines = [
        f"stamp: {lc['stamp']['date_utc'][:10]} | torch {lc['stamp']['torch']} | {lc['checkpoint']} "
        f"({lc['positions']} positions, trained on T = {lc['context_length']})",
        f"{lc['num_segments']} validation stretches of N = {lc['length']} characters, "
        "decoded one at a time",
        f"{lc['wall_time_s'] / 60:.1f} min wall; for scale, the checkpoint's own val loss over all "
        f"593 validation windows (37,952 of the 38,004 characters): {lc['checkpoint_val_loss']} "
        "nats/char\n",
        f"{'cache':>20} {'tokens':>6} {'positions < 64':>15} {'positions >= 64':>16}",
    ]
    for name, s in lc["losses"].items():
        size = "all" if name == "full" else sum(int(t) for t in name.split() if t.isdigit())
        lines.append(f"{name:>20} {size:>6} {s['inside']:15.4f} {s['past']:16.4f}")
    return "\n".join(lines)


def text_position_penalty(lc: dict) -> dict[int, float]:
    """Per cache size S: the loss past the training context of S − 4 recent keys + 4 sinks at their
    text positions minus that of a plain window of S."""
    loss, n = lc["losses"], lc["num_sink"]
    return {
        s: loss[f"window {s - n} + {n} sinks"]["past"] - loss[f"window {s}"]["past"]
        for s in lc["cache_sizes"]
    }


def per_block(lc: dict) -> tuple[list[float], dict[str, list[float]]]:
    """The loss of each block of 64 characters: the full cache's, and every other cache's by name."""
    blocks = {k: v["per_block"] for k, v in lc["losses"].items()}
    return blocks.pop("full"), blocks


def renumbering_share(sinks: dict) -> list[float]:
    """Per cache size: the share of the text-position sinks' penalty (against a plain window)
    that renumbering removes, 1 − (renumbered − window) / (text positions − window)."""
    rope = sinks["rope"]
    return [
        1
        - rope[f"S={s}"]["renumbered_minus_window"]["mean"]
        / rope[f"S={s}"]["absolute_minus_window"]["mean"]
        for s in rope["sizes"]
    ]


def renumbered_table(sinks: dict) -> str:
    """Section 8: sinks at text positions and renumbered against a plain window, past position 64."""
    rp = sinks["rope"]
    lines = [
        f"{rp['stretches']} stretches of {rp['length']} characters; loss at positions >= "
        f"{rp['context_length']}, nats/char"
    ]
    for s in rp["sizes"]:
        r = rp[f"S={s}"]
        lines.append(f"S={s}: " + ", ".join(f"{k} {v:.4f}" for k, v in r["past_loss"].items()))
        for k in ("absolute_minus_window", "renumbered_minus_window", "renumbered_minus_absolute"):
            lines.append(f"    {k:26s} {pm(r[k])}  95% CI {r[k]['ci95']}")
    lines.append(
        "share of the text-position sinks' penalty that renumbering removes: "
        + ", ".join(f"{x:.0%}" for x in renumbering_share(sinks))
    )
    return "\n".join(lines)

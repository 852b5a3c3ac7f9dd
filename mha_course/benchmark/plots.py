"""Chapter 8: the benchmark's three pictures, each titled with the stamp of the run it shows.

Medians with inter-quartile bars (never a single run), the sequence-length sweep on log-log axes
with fitted slopes, and decode time per token against context length for MHA, GQA and MQA.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from mha_course.benchmark.stamp import stamp_label


def plot_comparison(results: dict, ax=None):
    """Horizontal bars: median ms per variant, whiskers from the first to the third quartile."""
    rows = [r for r in results["comparison"]["rows"] if r["status"] == "ok"]
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    names = [r["variant"] for r in rows]
    med = [r["ms_median"] for r in rows]
    err = [[r["ms_median"] - r["ms_q1"] for r in rows], [r["ms_q3"] - r["ms_median"] for r in rows]]
    colors = ["tab:orange" if r["level"] == "module" else "tab:blue" for r in rows]
    ax.barh(names, med, xerr=err, color=colors, capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel("median time per call (ms); bars = inter-quartile range")
    p = results["comparison"]["problem"]
    ax.set_title(
        f"B{p['B']} L{p['L']} E{p['E']} H{p['H']} {p['dtype']}"
        f"{' causal' if p['causal'] else ''}  (blue: kernel, orange: module)\n"
        f"{stamp_label(results['stamp'])}",
        fontsize=9,
    )
    return ax


def plot_sweep(results: dict, ax=None):
    """Log-log time against L, one line per variant, fitted slope in the legend."""
    rows, slopes = results["sweep"]["rows"], results["sweep"].get("slopes", {})
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted(
            (r["L"], r["ms_median"]) for r in rows if r["variant"] == name and r["status"] == "ok"
        )
        if not pts:
            continue
        slope = slopes.get(name)
        label = f"{name} (slope {slope:.2f})" if slope is not None else name
        ax.plot(*zip(*pts), marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L (log scale)")
    ax.set_ylabel("median ms (log scale)")
    ax.set_title(
        f"causal attention time vs L — slope 2 = quadratic\n{stamp_label(results['stamp'])}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return ax


def plot_decode(results: dict, ax=None):
    """Decode µs per step against cached context length, MHA vs GQA vs MQA."""
    rows = [r for r in results["decode"]["rows"] if r["status"] == "ok"]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted((r["S"], r["us_per_token"]) for r in rows if r["variant"] == name)
        ax.plot(*zip(*pts), marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cached context length S (log scale)")
    ax.set_ylabel("µs per decode step (log scale)")
    ax.set_title(
        f"decode: one token against the KV cache\n{stamp_label(results['stamp'])}", fontsize=9
    )
    ax.legend(fontsize=8)
    return ax


def save_plots(results: dict, folder: str | Path, stem: str) -> list[Path]:
    """Write the three plots as ``<stem>_{comparison,sweep,decode}.png`` in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in (
        ("comparison", plot_comparison),
        ("sweep", plot_sweep),
        ("decode", plot_decode),
    ):
        ax = draw(results)
        ax.figure.tight_layout()
        path = folder / f"{stem}_{name}.png"
        ax.figure.savefig(path, dpi=110)
        plt.close(ax.figure)
        paths.append(path)
    return paths

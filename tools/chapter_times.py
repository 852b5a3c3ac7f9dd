"""The time each lecture states up top, computed from the notebook, never guessed.

    python tools/chapter_times.py              # every chapter: words, code cells, run time, minutes
    python tools/chapter_times.py --measure notebooks/02_scaled_dot_product_attention.ipynb
    python tools/chapter_times.py --calibrate  # the rates fitted to the reviewer's times, residuals
    python tools/chapter_times.py --write      # put each chapter's figure in its header

A reader's time cannot be measured here, so it is estimated from what can be counted and timed:

    minutes = words of prose / WORDS_PER_MINUTE + code cells * MINUTES_PER_CODE_CELL + run time

rounded to the nearest ROUND_TO minutes. The two rates are a least-squares fit (``--calibrate``)
to a reviewer's measured times (issue #32: Part I chapters 40-60 min, chapter 13 about 90, 14
about 50, 16 about 55), rounded. The run
time is the notebook's measured wall time, top to bottom (``--measure`` runs a copy, never the
notebook itself; ``tools/execute.py`` records it too), kept in ``tools/notebook_run_times.json`` with
the date, the load average and the cores it was taken with. ``tests/test_chapter_times.py`` fails
when a chapter's stated time differs from this figure, so the headers cannot go stale.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from run_times import (
    RUN_TIMES,
    load_run_times,
    record_run_time,
)  # tools/run_times.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

WORDS_PER_MINUTE = 150  # prose with maths, read to be understood (fitted: 155)
MINUTES_PER_CODE_CELL = 1.75  # read the cell, run it, read its output (fitted: 1.85)
ROUND_TO = 5
# The reviewer's measured minutes (issue #32); Part I (chapters 1-11) was given as 40-60: its mean 50.
REVIEWER = {"Part I": 50, "13": 90, "14": 50, "16": 55}
PART_I = [f"{n:02d}" for n in range(1, 12)]
# The line each chapter carries under its title; the test compares its number with `minutes`.
SENTENCE = (
    "**Time:** about {} minutes (estimated from its length and measured run time; "
    "see the start page)."
)
STATED = re.compile(re.escape(SENTENCE).replace(r"\{\}", r"(\d+)"))
OLD_STATED = re.compile(r" ?About \d+ minutes\.")  # the guessed times this tool replaced


@dataclass(frozen=True)
class ChapterTime:
    """What a chapter's stated time is made of."""

    FIELDS = ("words", "code_cells", "run_seconds")

    name: str
    words: int
    code_cells: int
    run_seconds: float

    @property
    def minutes(self) -> int:
        raw = (
            self.words / WORDS_PER_MINUTE
            + self.code_cells * MINUTES_PER_CODE_CELL
            + self.run_seconds / 60
        )
        return max(ROUND_TO, ROUND_TO * round(raw / ROUND_TO))


def chapters() -> list[Path]:
    """The lecture notebooks that state a time: every chapter, not the start page."""
    return [p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) if not p.name.startswith("00_")]


def prose_words(nb: dict) -> int:
    """Words in the markdown cells, the stated time left out (it would count itself)."""
    text = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return len(STATED.sub("", text).split())


def chapter_time(path: Path, run_times: dict[str, dict] | None = None) -> ChapterTime:
    """The figure for one notebook; a notebook never measured has no run time to add, and says so."""
    run_times = load_run_times() if run_times is None else run_times
    if path.name not in run_times:
        raise SystemExit(
            f"{path.name} has no measured run time in {RUN_TIMES.relative_to(ROOT)}: "
            f"run `python tools/chapter_times.py --measure notebooks/{path.name}` first"
        )
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = sum(c["cell_type"] == "code" for c in nb["cells"])
    return ChapterTime(path.name, prose_words(nb), cells, run_times[path.name]["seconds"])


def measure(path: Path) -> float:
    """Run a copy of the notebook top to bottom (tools/execute.py's way); the file is not rewritten."""
    import execute  # tools/execute.py, beside this file
    import nbformat

    return execute.run(nbformat.read(path, as_version=4), path)


def calibrate(times: dict[str, ChapterTime]) -> tuple[float, float, dict[str, float]]:
    """Least-squares words-per-minute and minutes-per-cell against REVIEWER (run time subtracted);
    returns them and each reviewer figure's residual under the rounded constants in this file."""
    import numpy as np

    groups = {"Part I": PART_I, **{k: [k] for k in REVIEWER if k != "Part I"}}
    mean = {
        g: [np.mean([getattr(times[c], f) for c in cs]) for f in ChapterTime.FIELDS]
        for g, cs in groups.items()
    }
    a = np.array([[m[0], m[1]] for m in mean.values()])
    b = np.array([REVIEWER[g] - m[2] / 60 for g, m in mean.items()])
    (per_word, per_cell), *_ = np.linalg.lstsq(a, b, rcond=None)
    residual = {
        g: m[0] / WORDS_PER_MINUTE + m[1] * MINUTES_PER_CODE_CELL + m[2] / 60 - REVIEWER[g]
        for g, m in mean.items()
    }
    return 1 / per_word, per_cell, residual


def write_header(path: Path, minutes: int) -> bool:
    """Put the stated time under the chapter's title (replacing an older one); True if changed."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    top = OLD_STATED.sub("", STATED.sub("", nb.cells[0].source)).replace("\n\n\n", "\n\n")
    title, _, body = top.partition("\n")
    new = f"{title}\n\n{SENTENCE.format(minutes)}\n\n{body.lstrip()}"
    if new == nb.cells[0].source:
        return False
    nb.cells[0].source = new
    nbformat.write(nb, path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--measure", nargs="+", type=Path, metavar="NOTEBOOK")
    action.add_argument("--calibrate", action="store_true")
    action.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    for path in args.measure or []:
        if not (path.is_file() and path.suffix == ".ipynb"):
            parser.error(f"--measure expects lecture notebooks (notebooks/NN_*.ipynb); got {path}")
        seconds = measure(path)
        record_run_time(path, seconds)
        print(f"{path}: {seconds:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    if args.measure:
        return 0
    times = {p.name[:2]: chapter_time(p) for p in chapters()}
    if args.calibrate:
        wpm, per_cell, residual = calibrate(times)
        print(
            f"fitted: {wpm:.0f} words a minute, {per_cell:.2f} min a code cell; in use: "
            f"{WORDS_PER_MINUTE}, {MINUTES_PER_CODE_CELL}"
        )
        print("in use - reviewer (min): " + ", ".join(f"{g} {r:+.1f}" for g, r in residual.items()))
        return 0
    print(f"{'chapter':40s} {'words':>6s} {'cells':>5s} {'run s':>6s} {'min':>4s}")
    for path in chapters():
        t = times[path.name[:2]]
        print(f"{t.name:40s} {t.words:6d} {t.code_cells:5d} {t.run_seconds:6.1f} {t.minutes:4d}")
        if args.write and write_header(path, t.minutes):
            print(f"  wrote the header of {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

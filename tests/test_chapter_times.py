"""Each chapter states its time under its title, and it is tools/chapter_times.py's figure
(issue #32: the guessed times were a third low). The figure is words / rate + code cells * rate +
the measured run time; the rates are fitted to a reviewer's measured times."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # the tools import each other

import chapter_times  # noqa: E402

CHAPTERS = chapter_times.chapters()


def _header(path: Path) -> str:
    return "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])


def test_every_chapter_is_timed():
    assert [p.name[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, 21)]
    assert set(chapter_times.load_run_times()) >= {p.name for p in CHAPTERS}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_stated_time_is_the_tools_figure(path):
    header = _header(path)
    stated = chapter_times.STATED.findall(header)
    assert stated == [str(chapter_times.chapter_time(path).minutes)], (
        f"{path.name} states {stated} minutes; run `python tools/chapter_times.py --write`"
    )
    assert header.split("\n")[2].startswith("**Time:**")  # up top: the line under the title
    assert not chapter_times.OLD_STATED.search(header)  # no second, guessed time


def test_the_rates_stay_near_the_reviewers_times():
    """The rounded rates in use land within 5 minutes of each measured figure (Part I: its mean)."""
    times = {p.name[:2]: chapter_times.chapter_time(p) for p in CHAPTERS}
    _, _, residual = chapter_times.calibrate(times)
    assert set(residual) == set(chapter_times.REVIEWER)
    assert all(abs(r) <= 5 for r in residual.values()), residual


@pytest.mark.parametrize(
    ("words", "cells", "seconds", "minutes"),
    [(0, 0, 0.0, 5), (1500, 0, 0.0, 10), (0, 20, 0.0, 35), (1500, 20, 600.0, 55)],
)
def test_the_figure_adds_reading_cells_and_run_time(words, cells, seconds, minutes):
    assert chapter_times.ChapterTime("x", words, cells, seconds).minutes == minutes


def test_a_notebook_never_measured_says_how_to_measure_it(tmp_path):
    path = tmp_path / "99_new.ipynb"
    path.write_text(json.dumps({"cells": []}))
    with pytest.raises(SystemExit, match=r"99_new.ipynb has no measured run time .* --measure"):
        chapter_times.chapter_time(path, run_times={})


def test_write_header_replaces_a_guessed_time(tmp_path):
    import nbformat

    path = tmp_path / "01_x.ipynb"
    cell = nbformat.v4.new_markdown_cell("# Chapter 1 — X\n\nIntro. About 30 minutes.\n\nMore.")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    assert chapter_times.write_header(path, 55)
    assert _header(path) == (
        "# Chapter 1 — X\n\n" + chapter_times.SENTENCE.format(55) + "\n\nIntro.\n\nMore."
    )
    assert not chapter_times.write_header(path, 55)  # already current: unchanged

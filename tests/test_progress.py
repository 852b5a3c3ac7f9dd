"""``mha-course progress`` / ``mha_course.progress()``: every exercise, its items passed on the
public self-check inputs, the points so far, the next hint level not asked yet; it reads the
learner's notebooks and changes nothing. A fresh clone's exercises/ score zero everywhere,
solutions/ full marks everywhere."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import mha_course
from mha_course.cli import main
from mha_course.learner.progress import collect, hints_asked, report

ROOT = Path(__file__).resolve().parents[1]


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> list:
    before = _digest(ROOT / "exercises")
    with (
        pytest.MonkeyPatch.context() as mp
    ):  # a learner who asked no hint yet (other tests ask some)
        mp.setenv("MHA_COURSE_STATE", str(tmp_path_factory.mktemp("state") / "asked.json"))
        rows = collect(ROOT / "exercises")
    assert _digest(ROOT / "exercises") == before, "progress changed exercises/"
    return rows


def test_fresh_exercises_score_zero(fresh) -> None:
    assert len(fresh) == len(list((ROOT / "exercises").glob("ex*.ipynb")))
    for row in fresh:
        assert row.notebook is not None and row.results, row.stem
        assert row.points == 0 and not any(r.passed for r in row.results), (row.stem, row.results)
        assert row.next_hints and "level 1 of" in row.next_hints[0], row.next_hints
    assert "total: 0/" in report(fresh)


@pytest.mark.slow
def test_solutions_score_full_marks() -> None:
    rows = collect(ROOT / "solutions")
    short = [
        (row.stem, row.points, row.max_points, [r.message for r in row.results if not r.passed])
        for row in rows
        if row.points != row.max_points
    ]
    assert not short, short
    assert all(not row.next_hints for row in rows)


def test_next_hint_is_the_first_level_not_asked(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MHA_COURSE_STATE", str(tmp_path / "asked.json"))
    mha_course.hint("ex01", 1)
    mha_course.hint("ex01", 1)
    assert hints_asked() == {"ex01_dot_product_attention": {"1": 2}}
    (tmp_path / "mine").mkdir()
    name = "ex01_dot_product_attention.ipynb"
    (tmp_path / "mine" / name).write_bytes((ROOT / "exercises" / name).read_bytes())
    capsys.readouterr()
    assert main(["progress", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out
    assert "next: mha-course hint ex01 1 level 3 of" in out, (
        out
    )  # a terminal: the command that runs there
    assert "(no notebook here)" in out and "ex04_multi_head_attention" in out  # the others


def test_from_a_notebook_folder(monkeypatch) -> None:
    """``mha_course.progress()`` in a kernel started in notebooks/ grades ../exercises."""
    import mha_course.learner.progress as lp

    seen = []
    monkeypatch.setattr(lp, "collect", lambda folder: seen.append(Path(folder)) or [])
    monkeypatch.chdir(ROOT / "notebooks")
    mha_course.progress(quiet=True)
    assert [p.resolve() for p in seen] == [(ROOT / "exercises").resolve()]


def test_the_value_a_cell_shows_is_one_line(monkeypatch) -> None:
    """A cell ending in ``mha_course.progress()`` shows the table, then a short repr (it showed ~20 KB of
    dataclass repr: every item's result)."""
    from IPython.lib.pretty import pretty

    import mha_course.learner.progress as lp

    rows = collect(ROOT / "exercises")
    monkeypatch.setattr(lp, "collect", lambda folder: rows)
    value = mha_course.progress(ROOT / "exercises", quiet=True)
    assert list(value) == rows and value[0].stem == rows[0].stem  # still the rows, as a list
    for shown in (repr(value), pretty(value)):
        assert "\n" not in shown and len(shown) < 200, shown
        assert f"0/{sum(r.max_points for r in rows):g} points" in shown, shown


def test_hint_command_goes_on_from_the_levels_asked(tmp_path: Path, monkeypatch, capsys) -> None:
    """``mha-course hint ex01 1`` (a new process each time) shows the level after the highest asked, in a
    notebook or in a terminal, and records it; bad arguments exit 2 naming the argument."""
    from mha_course.grading import hints as H

    monkeypatch.setenv("MHA_COURSE_STATE", str(tmp_path / "asked.json"))
    n = len(H.table()["ex01_dot_product_attention"]["1"]["levels"])
    H.reset()
    mha_course.hint("ex01", 1)  # level 1, in a notebook
    H.reset()  # a new process: only the file remembers
    capsys.readouterr()
    assert main(["hint", "ex01", "1"]) == 0
    out = capsys.readouterr().out
    assert "ex01 task 1 — " in out and f"hint 2 of {n}" in out, out
    assert f"(run mha-course hint ex01 1 again for hint 3 of {n})" in out or n == 2, out
    assert hints_asked()["ex01_dot_product_attention"]["1"] == 2
    assert (
        main(["hint", "ex01", "1", "--level", "1"]) == 0 and "hint 1 of" in capsys.readouterr().out
    )
    assert (
        main(["hint", "ex01"]) == 0 and "mha-course hint ex01 1  task 1" in capsys.readouterr().out
    )
    assert main(["hint", "ex99", "1"]) == 2 and "exercise: expected" in capsys.readouterr().err
    assert main(["hint", "ex01", "9"]) == 2 and "task: expected one of" in capsys.readouterr().err
    H.reset()

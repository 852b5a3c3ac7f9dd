"""``mha-course release`` never writes over a learner's work in exercises/ without a copy and a
message, and ``release --check`` (which ``make test`` runs, in tests/grading/test_stubs.py) does
not send a learner to a command that would lose it. Before, release overwrote edited exercises
silently."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from mha_course.authoring.keep_work import STUB, holds_work
from mha_course.cli import main

ROOT = Path(__file__).resolve().parents[1]
NAME = "ex01_dot_product_attention.ipynb"


@pytest.fixture
def course(tmp_path: Path) -> Path:
    (tmp_path / "solutions").mkdir()
    shutil.copy(ROOT / "solutions" / NAME, tmp_path / "solutions" / NAME)
    assert _release(tmp_path) == 0
    return tmp_path


def _release(course: Path, *extra: str) -> int:
    return main(
        [
            "release",
            "--solutions",
            str(course / "solutions"),
            "--exercises",
            str(course / "exercises"),
            "--hints",
            str(course / "hints.json"),
            *extra,
        ]
    )


def _change_solution(course: Path) -> None:
    """A maintainer's edit: the generated exercise changes."""
    path = course / "solutions" / NAME
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\n\n(An extra sentence from the maintainer.)"
    nbformat.write(nb, path)


def _fill_in_first_task(course: Path) -> str:
    """A learner's edit: the first stub replaced by the solution's code, saved without running."""
    path = course / "exercises" / NAME
    nb = nbformat.read(path, as_version=4)
    solution = {
        c.id: c.source for c in nbformat.read(course / "solutions" / NAME, as_version=4).cells
    }
    cell = next(c for c in nb.cells if c.cell_type == "code" and STUB in c.source)
    cell.source = solution[cell.id]
    nbformat.write(nb, path)
    return path.read_text(encoding="utf-8")


def test_a_generated_exercise_is_replaced_without_a_copy(course: Path, capsys) -> None:
    _change_solution(course)
    assert _release(course) == 0
    assert not list(course.glob("exercises/backup-*")), "a pristine exercise needs no copy"
    assert "held work" not in capsys.readouterr().out


def test_work_is_copied_before_release_writes(course: Path, capsys) -> None:
    mine = _fill_in_first_task(course)
    _change_solution(course)
    capsys.readouterr()
    assert _release(course) == 0
    out = capsys.readouterr().out
    copies = list(course.glob(f"exercises/backup-*/{NAME}"))
    assert len(copies) == 1 and copies[0].read_text(encoding="utf-8") == mine
    assert f"held work (outputs or filled-in tasks): copied to {copies[0]}" in out, out
    assert STUB in (course / "exercises" / NAME).read_text(encoding="utf-8")  # the fresh copy


def test_check_names_the_work_and_changes_nothing(course: Path, capsys) -> None:
    mine = _fill_in_first_task(course)
    capsys.readouterr()
    assert _release(course, "--check") == 1
    out = capsys.readouterr().out
    assert (
        "(it holds work: outputs or filled-in tasks)" in out
        and "backup-" in out
        and "my-work/" in out
    )
    assert "run `mha-course release` and commit" not in out, out
    assert (course / "exercises" / NAME).read_text(encoding="utf-8") == mine
    assert not list(course.glob("exercises/backup-*"))


def test_outputs_and_added_cells_count_as_work(course: Path) -> None:
    generated = (course / "exercises" / NAME).read_text(encoding="utf-8")
    assert not holds_work(generated, generated)
    ran = nbformat.reads(generated, as_version=4)
    next(c for c in ran.cells if c.cell_type == "code").outputs = [
        nbformat.v4.new_output("stream", text="hello")
    ]
    assert holds_work(nbformat.writes(ran), generated)
    added = nbformat.reads(generated, as_version=4)
    added.cells.append(nbformat.v4.new_code_cell("my_scratch = 1"))
    assert holds_work(nbformat.writes(added), generated)
    assert holds_work("not a notebook", generated)


def test_release_says_what_it_wrote(course: Path, capsys) -> None:
    """``release`` ended with "exercises/ is up to date (1 file(s) written)" whatever it wrote (the
    hints table, docs/mistakes.md, or nothing), and listed an exercise without a solution as written
    (issue 31, item 11)."""
    capsys.readouterr()
    assert _release(course) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith(
            f"release wrote nothing: the 1 exercise notebook(s) in {course / 'exercises'}/, the hints table "
            "were already current"
        )
    )
    _change_solution(course)
    (course / "hints.json").write_text("{}\n", encoding="utf-8")
    orphan = course / "exercises" / "ex99_dropped.ipynb"
    orphan.write_text("{}", encoding="utf-8")
    assert _release(course) == 0
    out = capsys.readouterr().out
    assert (
        f"wrote {course / 'exercises' / NAME}\n" in out
        and f"wrote {course / 'hints.json'}\n" in out
    ), out
    assert f"wrote {orphan}" not in out and f"not written: {orphan} has no solution" in out, out
    assert (
        f"release wrote 1 of 1 exercise notebook(s), {course / 'hints.json'}; everything else"
        in out
    ), out
    assert orphan.read_text(encoding="utf-8") == "{}"

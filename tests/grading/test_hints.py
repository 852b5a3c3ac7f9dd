"""Hints come in levels the learner asks for (``hint("ex04", 3)``), from one source: the solution
blocks' ``# HINT k:`` lines, extracted by ``mha-course release`` into ``hints.json``. The released
stubs (exercises/ and nbgrader's source) contain none of the hint text."""

from __future__ import annotations

import nbformat
import pytest
import torch
from grading_helpers import EXERCISES, SOLUTIONS

from mha_course import hint
from mha_course.authoring.release import nbgrader_source, release
from mha_course.authoring.solution_blocks import Task, _map_blocks, levels, stub_source
from mha_course.grading import check, notebooks
from mha_course.grading import hints as H

TABLE = H.table()
SOLVED = sorted(SOLUTIONS.glob("ex*.ipynb"))


def _all_levels(stem: str) -> list[str]:
    return [lvl for t in TABLE[stem].values() for lvl in t["levels"]]


@pytest.mark.parametrize("path", SOLVED, ids=[p.stem for p in SOLVED])
def test_released_stubs_contain_no_hint_text(path):
    """No line of any level is in a released stub cell (exercises/ or nbgrader's source), and no
    whole level of some length anywhere in the released notebook (short ones, like
    ``query @ keys.T``, may also be in the task's prose)."""
    released = {
        "exercises": (EXERCISES / path.name).read_text(encoding="utf-8"),
        "nbgrader source": nbgrader_source(path, seed=1),
    }
    lvls = _all_levels(path.stem)
    parts = [line for lvl in lvls for line in lvl.split("\n")]
    assert parts
    for where, text in released.items():
        cells = nbformat.reads(text, as_version=4).cells
        for c in cells:  # what nbgrader's generate_assignment keeps: the solution regions go
            c.source = _map_blocks(c.source, lambda indent, begin, block, end: [])
        stubs = "\n".join(c.source for c in cells if c.metadata.get("nbgrader", {}).get("solution"))
        everything = "\n".join(c.source for c in cells)
        assert stubs and "# HINT" not in everything, where
        leaked = [p for p in parts if p in stubs] + [
            lv for lv in lvls if len(lv) >= 40 and lv in everything
        ]
        assert not leaked, f"{where} of {path.stem} shows hint text: {leaked[:2]}"
        assert 'from mha_course import hint; hint("' in stubs, where  # ...but says how to ask


def test_every_graded_item_has_levelled_hints():
    items = {it.id for its in notebooks().values() for it in its}
    with_hints = {t["item"]: len(t["levels"]) for tasks in TABLE.values() for t in tasks.values()}
    assert items <= set(with_hints), sorted(items - set(with_hints))
    assert min(with_hints.values()) >= 2  # at least a nudge and an approach


def test_hint_reveals_levels_in_order_then_stays_on_the_last(capsys):
    H.reset()
    expected = TABLE["ex04_multi_head_attention"]["3"]["levels"]
    shown = []
    for _ in range(len(expected) + 1):
        hint("ex04", 3)
        shown.append(capsys.readouterr().out)
    for k, out in enumerate(shown[:-1], 1):
        assert f"hint {k} of {len(expected)}" in out
        assert (
            " ".join(out.split()).find(" ".join(expected[k - 1].split())) > 0
        )  # wrapped, not changed
        assert all(
            " ".join(e.split()) not in " ".join(out.split()) for e in expected[k:]
        )  # nothing ahead
    assert shown[-1] == shown[-2] and "last hint" in shown[-1]
    hint("ex04", 2, level=2)  # ask for one level directly; the next call goes on from there
    hint("ex04", 2)
    out = capsys.readouterr().out
    assert out.index("hint 2 of 3") < out.index("hint 3 of 3") and "hint 1 of" not in out
    H.reset()


def test_hint_lists_tasks_and_rejects_bad_arguments(capsys):
    hint("ex09")
    out = capsys.readouterr().out
    assert 'hint("ex09", 1)' in out and 'hint("ex09", 3)' in out
    with pytest.raises(ValueError, match="exercise: expected"):
        hint("ex99", 1)
    with pytest.raises(ValueError, match="task: expected one of 1, 2, 3"):
        hint("ex09", 7)
    with pytest.raises(ValueError, match="level: expected 1 .. 3"):
        hint("ex09", 1, level=4)


def test_failing_item_points_to_its_hint(capsys):
    def scaled_scores(q, k):
        return q @ k.transpose(-2, -1)  # no 1/sqrt(D)

    check(
        "ex02",
        {
            "scaled_scores": scaled_scores,
            "make_causal_mask": lambda L, S: torch.ones(L, S).tril().bool(),
        },
    )
    out = capsys.readouterr().out
    assert 'stuck on ex02_scaled_scores? hint("ex02", 1)' in out
    assert "stuck on ex02_causal_mask" not in out  # passed: no pointer


def test_stub_hides_hints_and_keeps_indentation():
    src = (
        "def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    # HINT 1: look at x\n"
        "    # HINT 2: return x\n    y = x\n    return y\n    ### END SOLUTION\n"
    )
    out = stub_source(src, Task("ex09", 2, "the identity"))
    assert "return y" not in out and "look at x" not in out and "return x" not in out
    assert '    # TASK 2 — the identity. Stuck? from mha_course import hint; hint("ex09", 2)' in out
    assert "    raise NotImplementedError('task 2 (the identity) is not written yet." in out
    assert levels(src) == ["look at x", "return x"]


def test_level_format_is_enforced():
    block = "### BEGIN SOLUTION\n{}\nx = 1\n### END SOLUTION"
    with pytest.raises(ValueError, match="without a level"):
        levels(block.format("# HINT: old style"))
    with pytest.raises(ValueError, match="without gaps"):
        levels(block.format("# HINT 1: a\n# HINT 3: c"))
    assert levels(block.format("# HINT 1: a\n# HINT 2: b\n# HINT 2: b, cont.")) == [
        "a",
        "b\nb, cont.",
    ]


def test_release_refuses_a_task_without_two_levels(tmp_path):
    """A new solution cell with a single level (or none) stops `mha-course release`, naming it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("## Task 1 — f (1 point)"),
        nbformat.v4.new_code_cell(
            "def f(x):\n    ### BEGIN SOLUTION\n    # HINT 1: only one\n"
            "    return x\n    ### END SOLUTION"
        ),
    ]
    (tmp_path / "sol").mkdir()
    nbformat.write(nb, tmp_path / "sol" / "ex98_demo.ipynb")
    with pytest.raises(
        ValueError, match="ex98_demo cell 1: every task needs at least two hint levels"
    ):
        release(tmp_path / "sol", tmp_path / "ex", hints=tmp_path / "hints.json")
    nb.cells = nb.cells[1:]  # no heading above the solution cell
    nbformat.write(nb, tmp_path / "sol" / "ex98_demo.ipynb")
    with pytest.raises(ValueError, match="needs a '## Task k — title' heading"):
        release(tmp_path / "sol", tmp_path / "ex", hints=tmp_path / "hints.json")

"""Root causes first (issue 23): a cell that does not compile is reported as that (cell, line,
parser message), not as "missing function"; an item failing because an earlier item's function
it calls fails is graded with the course's own where it may be (issue #31 item 5), else says
which failure it inherits, in the graded notebook and in the in-kernel check."""

from __future__ import annotations

import numpy as np
import pytest
from grading_helpers import build, grade_many, solution, toy_item

from mha_course.grading import check, items_for
from mha_grader.causes import call_graph, explain, reached
from mha_grader.compare import ItemResult
from mha_grader.notebook import code_cells
from mha_grader.registry import notebooks

BROKEN = """
def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True)
    return e / e.sum(axis=-1, keepdims=True)
"""
WHOLE_ARRAY = """
def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causes")
    return grade_many(
        {
            "syntax": (
                build("ex01", tmp / "a" / "sub.ipynb", replace={"ex01_softmax": BROKEN}),
                "ex01",
            ),
            "softmax": (
                build("ex01", tmp / "b" / "sub.ipynb", replace={"ex01_softmax": WHOLE_ARRAY}),
                "ex01",
            ),
        }
    )


def test_a_syntax_error_is_reported_as_itself(graded):
    results, notes = graded["syntax"]
    r = results["ex01_softmax"]
    assert r.status == "missing function"
    assert "renamed or deleted" not in r.message
    assert "does not compile" in r.message and "SyntaxError at line 2" in r.message, r.message
    assert notes[0].startswith("cell ") and "SyntaxError at line 2 (" in notes[0], notes
    assert "was never closed" in notes[0]


def test_a_later_item_is_graded_alone_with_the_course_softmax(graded):
    """ex01's ``attend`` may use the course's softmax (issue #31 item 5): it keeps its marks, and
    says what was replaced; with a softmax whose cell does not compile too."""
    for key in ("softmax", "syntax"):
        results, _ = graded[key]
        assert not results["ex01_softmax"].passed
        r = results["ex01_attend"]
        assert r.passed and r.message.startswith("graded with the course's `softmax`"), r.message
    assert "calls your" not in graded["softmax"][0]["ex01_fix_weights"].message


@pytest.mark.parametrize(
    "status_a, status_b, says",
    [
        ("wrong values", "error", "inherits the failure of task 1 (nb_1: this item calls your `f`"),
        ("wrong values", "wrong values", "inherits the failure of task 1 (nb_1"),
        ("passed", "wrong values", None),
    ],
)
def test_an_item_that_may_not_be_graded_alone_says_which_failure_it_inherits(
    status_a, status_b, says
):
    items = [toy_item("nb_1", "f", label="task 1"), toy_item("nb_2", "g", uses=("f",))]
    results = [
        ItemResult("nb_1", "f", 0.0, 1, status_a, "a"),
        ItemResult("nb_2", "g", 0.0, 1, status_b, "own words"),
    ]
    out, _ = explain(results, [], items, graph={})
    msg = out[1].message
    assert (msg.startswith(says) and msg.endswith("own words")) if says else msg == "own words"


def test_the_in_kernel_check_grades_attend_alone(capsys):
    ns: dict = {"np": np}
    exec(
        WHOLE_ARRAY + "\ndef dot_scores(q, k):\n    return q @ k.T\n"
        "def attend(q, k, v):\n    w = softmax(dot_scores(q, k))\n    return w @ v, w\n",
        ns,
    )
    res = {r.id: r for r in check("ex01", namespace=ns, quiet=True)}
    assert res["ex01_attend"].passed, res["ex01_attend"].message
    assert res["ex01_attend"].message.startswith("graded with the course's `softmax`")
    assert res["ex01_scores"].passed and not res["ex01_softmax"].passed


def test_declared_uses_equal_the_solutions_calls():
    """``Item.uses`` (the fallback) is what each solution's function reaches among earlier items."""
    for stem, items in notebooks().items():
        graph = call_graph(code_cells(solution(stem)))
        fns = [it.function for it in items]
        for k, it in enumerate(items):
            derived = tuple(f for f in fns[:k] if f in reached(graph, it.function))
            assert tuple(it.uses) == derived, (
                f"{it.id}: declares uses={tuple(it.uses)}, its solution calls {derived}"
            )
            assert not any(f in reached(graph, it.function) for f in fns[k + 1 :]), (
                f"{it.id} uses a LATER item"
            )
    assert items_for("ex01")[2].uses == ("softmax", "dot_scores")

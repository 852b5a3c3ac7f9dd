"""Root causes first (issue 23): a cell that does not compile is reported as that (cell, line,
parser message), not as "missing function"; an item failing because an earlier item's function
it calls fails says so, in the graded notebook and in the in-kernel check."""

from __future__ import annotations

import numpy as np
import pytest
from grading_helpers import build, grade_many, solution

from mha_course.grading import check, items_for
from mha_grader.causes import call_graph, reached
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


def test_a_later_item_names_the_earlier_function_it_calls(graded):
    results, _ = graded["softmax"]
    assert not results["ex01_softmax"].passed
    msg = results["ex01_attend"].message
    assert msg.startswith(
        "this item calls your `softmax` from task 1, which fails its own item (ex01_softmax)"
    ), msg
    assert results["ex01_scores"].passed and "calls your" not in results["ex01_fix_weights"].message
    # the syntax-error case: attend's NameError comes from softmax, which is named first
    assert graded["syntax"][0]["ex01_attend"].message.startswith("this item calls your `softmax`")


def test_the_in_kernel_check_derives_the_same_from_the_functions(capsys):
    ns: dict = {"np": np}
    exec(
        WHOLE_ARRAY + "\ndef dot_scores(q, k):\n    return q @ k.T\n"
        "def attend(q, k, v):\n    w = softmax(dot_scores(q, k))\n    return w @ v, w\n",
        ns,
    )
    res = {r.id: r for r in check("ex01", namespace=ns, quiet=True)}
    assert res["ex01_attend"].message.startswith("this item calls your `softmax` from task 1")
    assert res["ex01_scores"].passed


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

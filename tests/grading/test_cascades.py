"""A wrong earlier task costs only its own points (issue #31 item 5): a later item that calls a
failing earlier function is graded again with the course's own (``mha_grader/substitute.py``);
its own mistake is still named and still costs its points; nothing is gained by the swap."""

from __future__ import annotations

import pytest
from grading_helpers import MASK_AFTER_SOFTMAX, build, grade_many, toy_item

from mha_course.grading import check, items_for

NO_SCALE = """
def scaled_scores(query, key):
    return query @ key.transpose(-2, -1)
"""
EMPTY_SCORES = """
def scaled_scores(query, key):
    raise NotImplementedError
"""
# task 1 "solved" by importing the course's substitute (by a name the grader does not skip
# cells for): it is stubbed out of task 1's unit
BORROWED = """
import importlib
scaled_scores = importlib.import_module("mha_course.grad" + "ing.child.substitutes").scaled_scores
"""
SPLIT_VIEW = """
def split_heads(x, num_heads):
    B, T, E = x.shape
    return x.view(B, num_heads, T, E // num_heads)
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cascades")
    subs = {
        "scores": ("ex02", {"ex02_scaled_scores": NO_SCALE}),
        "empty": ("ex02", {"ex02_scaled_scores": EMPTY_SCORES}),
        "borrowed": ("ex02", {"ex02_scaled_scores": BORROWED}),
        "two": ("ex02", {"ex02_scaled_scores": NO_SCALE, "ex02_attention": MASK_AFTER_SOFTMAX}),
        "split": ("ex04", {"ex04_split_heads": SPLIT_VIEW}),
    }
    return grade_many(
        {
            key: (build(ex, tmp / key / "sub.ipynb", replace=rep), ex)
            for key, (ex, rep) in subs.items()
        }
    )


def _lost(results, ex: str) -> set[str]:
    return {it.id for it in items_for(ex) if not results[it.id].passed}


@pytest.mark.parametrize(
    "key, ex, earlier, later",
    [
        ("scores", "ex02", "ex02_scaled_scores", "ex02_attention"),
        ("empty", "ex02", "ex02_scaled_scores", "ex02_attention"),
        ("split", "ex04", "ex04_split_heads", "ex04_mha_forward"),
    ],
)
def test_a_wrong_earlier_task_costs_only_its_own_points(graded, key, ex, earlier, later):
    results, _ = graded[key]
    assert _lost(results, ex) == {earlier}, {i: results[i].message for i in _lost(results, ex)}
    r = results[later]
    assert r.points == r.max_points
    assert r.message.startswith("graded with the course's"), r.message
    assert earlier in r.message, r.message


def test_two_mistakes_one_behind_a_cascade_are_both_named(graded):
    results, _ = graded["two"]
    assert _lost(results, "ex02") == {"ex02_scaled_scores", "ex02_attention"}
    assert "no scaling" in results["ex02_scaled_scores"].message.lower()
    r = results["ex02_attention"]
    assert r.points == 0 and "this item's own mistake" in r.message, r.message
    after = next(m for m in items_for("ex02")[3].mistakes if m.name == "mask after softmax")
    assert after.feedback in r.message, r.message


def test_the_course_substitute_cannot_pass_the_earlier_task(graded):
    results, _ = graded["borrowed"]
    assert results["ex02_scaled_scores"].status == "forbidden API", results["ex02_scaled_scores"]
    assert results["ex02_attention"].passed  # graded with the course's own: its own work is right


def test_the_in_kernel_check_grades_alone_too():
    import torch

    ns: dict = {"torch": torch, "math": __import__("math")}
    exec(NO_SCALE, ns)
    exec(
        "def attention(query, key, value, attn_mask=None):\n"
        "    s = scaled_scores(query, key)\n"
        "    if attn_mask is not None:\n"
        "        s = s.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool "
        "else s + attn_mask\n"
        "    w = torch.softmax(s, dim=-1)\n"
        "    return w @ value, w\n",
        ns,
    )
    res = {r.id: r for r in check("ex02", namespace=ns, quiet=True)}
    assert not res["ex02_scaled_scores"].passed
    assert res["ex02_attention"].passed, res["ex02_attention"].message


SUB = "mha_course.grading.child.substitutes.softmax"


@pytest.mark.parametrize(
    "items, says",
    [  # (id, function, Item keywords) per item, in notebook order
        ([("a", "f", {"substitutes": (("softmax", SUB),)})], "earlier item"),
        (
            [
                ("a", "softmax", {}),
                ("b", "g", {"substitutes": (("softmax", SUB),), "forbidden": (SUB,)}),
            ],
            "forbidden to this item",
        ),
        (
            [("a", "softmax", {}), ("b", "g", {"substitutes": (("softmax", SUB + "_x"),)})],
            "no def/class",
        ),
    ],
)
def test_a_bad_substitute_declaration_is_refused(items, says):
    from mha_grader.registry import BadSubstitute, check_substitutes

    with pytest.raises(BadSubstitute, match=says):
        check_substitutes([toy_item(i, f, **kw) for i, f, kw in items])


def test_the_class_report_counts_the_own_mistake_and_the_inheritance(graded):
    from mha_grader.class_report import tag_mistakes
    from mha_grader.compare import ItemResult

    by_id = {it.id: it for it in items_for("ex02")}
    two, _ = graded["two"]
    tags = tag_mistakes(by_id, list(two.values()))
    assert tags["ex02_attention"] == "mask_after_softmax", tags
    inherited = ItemResult(
        "ex02_attention",
        "attention",
        0.0,
        3,
        "error",
        "inherits the failure of task 1 (ex02_scaled_scores: ...",
    )
    assert tag_mistakes(by_id, [inherited]) == {"ex02_attention": "inherits_ex02_scaled_scores"}


@pytest.mark.parametrize(
    "earlier, later, retried",
    [
        ("wrong values", "error", True),
        ("wrong values", "not implemented", True),  # the empty earlier task raised it
        ("passed", "wrong values", False),  # the later item's own mistake
        ("wrong values", "invalid result", False),  # the parent's verdict stands
        ("wrong values", "timeout", False),
        ("wrong values", "missing function", False),
    ],
)
def test_which_items_are_graded_again(earlier, later, retried):
    from mha_grader.compare import ItemResult
    from mha_grader.substitute import retries

    items = [toy_item("a", "f"), toy_item("b", "g", uses=("f",), substitutes=(("f", SUB),))]
    verdicts = {
        "a": ItemResult("a", "f", 0.0, 1, earlier),
        "b": ItemResult("b", "g", 0.0, 1, later),
    }
    assert retries(items, verdicts, None) == ({"b": {"f": SUB}} if retried else {})

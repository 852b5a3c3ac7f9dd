"""Feedback is written by the parent from a fixed vocabulary (attack class 11: feedback as a
channel). A submission that stuffs its environment, the grader's environment or a peer's notebook
into exception texts, exception class names, return types or sys.exit gets none of it into its
feedback.md / results.json; a wrong answer of 0 on a scalar item does not reveal the right value."""

from __future__ import annotations

import json

import numpy as np
import pytest
from grading_helpers import TEST_LIMITS, build

from mha_course.grading import all_items, items_for
from mha_grader.classroom import grade_class
from mha_grader.compare import as_arrays, judge, to_framework

MARK = "LEAK-7f3a"
EX02 = "ex02_scaled_dot_product_attention"

GRAB = f'''
import glob, os
def _grab():
    """Everything a submission might want to smuggle out, prefixed with the marker."""
    text = "{MARK} " + repr(dict(os.environ))
    for p in ("/proc/%d/environ" % os.getppid(), "/proc/%d/cmdline" % os.getppid()):
        try:
            text += open(p, "rb").read().decode(errors="replace")
        except OSError:
            pass
    for nb in glob.glob("/proc/%d/cwd/**/peer/*.ipynb" % os.getppid(), recursive=True) + \\
            glob.glob("/tmp/**/peer/*.ipynb", recursive=True):
        try:
            text += open(nb).read()[:5000]
        except OSError:
            pass
    return text + " {MARK}"
'''
ATTACK = {  # each graded function of ex02 leaks through another door
    "ex02_scaled_scores": GRAB + "def scaled_scores(query, key):\n    raise ValueError(_grab())\n",
    "ex02_causal_mask": GRAB
    + (
        f"Leak = type('{MARK.replace('-', '_')}_' + 'x' * 50, (KeyError,), {{}})\n"
        "def make_causal_mask(L, S):\n    raise Leak(_grab())\n"
    ),
    "ex02_additive_mask": GRAB
    + "def additive_mask(mask, dtype):\n    raise NotImplementedError(_grab())\n",
    "ex02_attention": GRAB
    + (
        f"class {MARK.replace('-', '_')}_Result:\n    pass\n"
        "def attention(query, key, value, attn_mask=None):\n"
        "    return globals()[[n for n in globals() if n.endswith('_Result')][0]]()\n"
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("feedback")
    sub = tmp / "submissions"
    build("ex02", sub / "peer" / f"{EX02}.ipynb", extra=[(1, f"# {MARK} the peer's own code")])
    build(
        "ex02",
        sub / "mallory" / f"{EX02}.ipynb",
        replace=ATTACK,
        extra=[
            (2, GRAB + "raise RuntimeError(_grab())"),
            (3, GRAB + "import sys\nsys.exit(_grab())"),
        ],
    )
    out = tmp / "out"
    mp = pytest.MonkeyPatch()
    mp.setenv("MHA_GRADER_SECRET_FOR_TEST", f"{MARK}-in-the-grader-environment")
    try:
        grade_class(sub, out, workers=2, key=bytes(range(32)), limits=TEST_LIMITS, progress=False)
    finally:
        mp.undo()
    return out


def test_no_child_text_reaches_the_feedback(graded):
    for f in ("feedback.md", "results.json"):
        text = (graded / "mallory" / f).read_text()
        assert MARK not in text and MARK.replace("-", "_") not in text, (
            f"{f} carries the child's text"
        )
        assert "PATH" not in text and "HOME" not in text
    res = {
        t["name"]: t for t in json.loads((graded / "mallory" / "results.json").read_text())["tests"]
    }
    assert res["ex02_scaled_scores"]["output"].startswith("error: raised ValueError at line ")
    assert res["ex02_causal_mask"]["output"].startswith(
        "error: raised KeyError at line "
    )  # its built-in base
    assert (
        res["ex02_additive_mask"]["output"]
        == "not implemented: raises NotImplementedError: the task is not done yet"
    )
    assert (
        res["ex02_attention"]["output"].startswith("wrong type: ")
        and "class from the notebook" in res["ex02_attention"]["output"]
    )
    notes = json.loads((graded / "mallory" / "results.json").read_text())["output"]
    assert "raised RuntimeError at line" in notes  # the failing top-level cell: type and line only
    peer = (graded / "peer" / "feedback.md").read_text()
    assert MARK not in peer and f"Score: {sum(it.points for it in items_for(EX02)):g} / " in peer


def _zero(item_id: str):
    item = next(it for it in all_items() if it.id == item_id)
    cases = item.cases(3)
    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    zeros = [[np.zeros_like(r) for r in rs] for rs in refs]
    return judge(item, cases, {"status": "ok", "outputs": zeros}), refs


@pytest.mark.parametrize(
    "item_id",
    [
        "ex08_attention_flops",
        "ex07_kv_cache_bytes",
        "ex08_attention_intensity",
        "ex04_mha_params",
        "ex03_head_params",
    ],
)
def test_a_wrong_zero_does_not_reveal_the_right_scalar(item_id):
    r, refs = _zero(item_id)
    assert not r.passed and r.status == "wrong values"
    ref = float(refs[0][0])
    for shown in {
        f"{ref:.3g}",
        f"{ref:.2g}",
        f"{ref:g}",
        f"{int(ref)}",
        f"{ref:.3e}",
        f"{ref:.1e}",
    }:
        assert shown not in r.message, f"{r.message!r} reveals the expected value {shown}"
    assert "100 % or more" in r.message


# ---- a "predict, then measure" item's ungraded prediction (Item.prediction) --------------------
def _ablation(outputs_of, public: bool = False):
    """Judge ex13's ablation on public cases with the reference's bytes and a prediction."""
    item = next(it for it in all_items() if it.id == "ex13_cache_ablation")
    cases = item.cases(12345)
    outs = []
    for case in cases:
        measured = as_arrays(item.reference(*to_framework(item, case)))[0]
        outs.append(outputs_of(measured))
    return judge(item, cases, {"status": "ok", "outputs": outs}, public=public)


def test_a_prediction_is_numbers_the_parent_writes():
    right = _ablation(lambda m: [m, m / m[0]])
    assert right.passed and right.points == 2
    assert "your prediction (ungraded, case 1 of 3): 1, " in right.message
    assert "4 of 4" not in right.message and "12 of 12 predicted values within 10%" in right.message
    wrong_guess = _ablation(lambda m: [m, np.full(m.shape, 7.0)])  # ungraded: full marks still
    assert (
        wrong_guess.passed
        and "7, 7, 7, 7" in wrong_guess.message
        and " 0 of 12 " in wrong_guess.message
    )
    # hostile numbers: NaN, inf, huge, tiny, a thousand values, ints; never more than 6 shown
    odd = np.array([np.nan, np.inf, -1e300, 1e-300, 3, 2.5] + [1.0] * 994)
    r = _ablation(lambda m: [m, odd])
    assert r.passed
    note = r.message.split("your prediction")[1]
    assert "not a number, not a number, <=-1e4, ~0, 3, 2.5 (+994 more)" in note
    assert "it has 1000 value(s) where the measurement has 4" in note
    assert len(r.message) < 400
    # wrong measurement: the prediction is recorded, the measured values are not shown
    bad = _ablation(lambda m: [m // 2, m / m[0]])
    assert not bad.passed and bad.status == "wrong values" and "your prediction" in bad.message
    assert "your measurement" not in bad.message
    shown = _ablation(
        lambda m: [m // 2, m / m[0]], public=True
    )  # check(): the values shown, and still the note
    assert "returned [" in shown.message and shown.message.count("your prediction (ungraded") == 1
    missing = _ablation(lambda m: [m])  # no prediction returned
    assert missing.status == "wrong type" and "your prediction" in missing.message


def test_a_missing_module_is_named_with_what_the_sandbox_provides(tmp_path):
    """``import einops`` (a package the grader lacks) said only "raised ModuleNotFoundError" (issue 31):
    a known module is named, with what the sandbox can import; a name the child made up is not echoed."""
    from grading_helpers import grade_many

    made_up = f"{MARK.replace('-', '_')}_module"
    sub = build(
        "ex02",
        tmp_path / "sub" / f"{EX02}.ipynb",
        extra=[(1, "import einops")],
        replace={
            "ex02_attention": f"def attention(query, key, value, attn_mask=None):\n    import {made_up}\n",
            "ex02_scaled_scores": "def scaled_scores(query, key):\n    from einops import einsum\n",
        },
    )
    results, notes = grade_many({"s": (sub, "ex02")})["s"]
    text = " ".join(notes)
    assert (
        "raised ModuleNotFoundError at line 1: `einops` is not installed where notebooks are graded, "
        "which provides the Python standard library, numpy, torch" in text
    ), notes
    assert "`einops` is not installed" in results["ex02_scaled_scores"].message, results[
        "ex02_scaled_scores"
    ]
    attention = results["ex02_attention"].message
    assert "the module is not installed" in attention and MARK.replace("-", "_") not in attention, (
        attention
    )


def test_feedback_groups_items_by_exercise_failures_first():
    """feedback.md was one table of every item (84 rows for the course), failures among them: it is one
    row per exercise, then each exercise that lost points with its failures first (issue 31, item 11)."""
    from mha_grader.compare import ItemResult
    from mha_grader.report import feedback_md

    def r(item_id, ok, message="all 4 cases match"):
        return ItemResult(
            item_id,
            item_id.split("_", 1)[1],
            1.0 if ok else 0.0,
            1.0,
            "passed" if ok else "wrong values",
            message,
        )

    results = [
        r("ex01_softmax", True),
        r("ex01_attend", True),
        r("ex02_scaled_scores", True),
        r("ex02_attention", False, "output 0: mask inverted | a"),
        r("ex02_causal_mask", True),
        r("ex03_project_qkv", False, "no `project_qkv` defined"),
    ]
    text = feedback_md("alice", results, ["cell 3: raised KeyError"])
    lines = text.splitlines()
    assert "**Score: 4 / 6**" in text
    assert (
        "| ex01 | 2/2 | 2 of 2 |" in lines
        and "| ex02 | 2/3 | 2 of 3 |" in lines
        and "| ex03 | 0/1 | 0 of 1 |" in lines
    )
    ex02 = lines.index("## ex02: 2/3 points")
    assert lines[ex02 + 2].startswith(
        "- **`ex02_attention`** (`attention`, 0/1) — wrong values: output 0: mask inverted \\| a"
    )
    assert lines[ex02 + 3] == "- passed: `ex02_scaled_scores`, `ex02_causal_mask`"
    assert lines.index("## ex03: 0/1 points") > ex02 and "## ex01" not in text
    assert "**Full marks:** ex01" in lines
    assert (
        sum(line.startswith("| ex0") for line in lines) == 3
    )  # one row per exercise, not per item

"""Index and count answers (rtol 0): on the public self-check inputs the feedback shows the value
returned, the value expected and the smallest public case separating them, not a relative-error
band; on secret grading inputs it still shows neither (test_feedback.py)."""

from __future__ import annotations

import numpy as np

from mha_course.grading import all_items
from mha_grader.compare import as_arrays, exact_answer, judge, to_framework


def _item(item_id):
    return next(it for it in all_items() if it.id == item_id)


def _judged(item_id, wrong, public):
    item = _item(item_id)
    cases = item.cases(12345)
    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    outs = [[wrong(r, c) for r in rs] for rs, c in zip(refs, cases)]
    return item, cases, refs, judge(item, cases, {"status": "ok", "outputs": outs}, public=public)


def test_an_index_shows_returned_expected_and_the_smallest_separating_case():
    item, cases, refs, r = _judged(
        "ex07_smallest_cache", lambda ref, c: np.asarray((int(ref) + 1) % len(c["configs"])), True
    )
    assert not r.passed and "relative error" not in r.message and "tolerance" not in r.message, (
        r.message
    )
    k = min(range(len(cases)), key=lambda k: cases[k]["configs"].size)  # the first of the smallest
    want = int(refs[k][0])
    assert r.message.startswith(
        f"returned {(want + 1) % len(cases[k]['configs'])}, expected {want} on the smallest "
        "public case that separates them"
    ), r.message
    assert f"[case {k + 1} of {len(cases)}: " in r.message


def test_a_count_shows_both_values():
    item, cases, refs, r = _judged("ex04_mha_params", lambda ref, c: np.asarray(ref) * 0 + 7, True)
    assert r.message.startswith("returned 7, expected ") and "relative error" not in r.message, (
        r.message
    )
    assert exact_answer(item)


def test_secret_inputs_show_no_values():
    item, cases, refs, r = _judged(
        "ex07_smallest_cache", lambda ref, c: np.asarray(int(ref) + 1), False
    )
    assert "returned" not in r.message and "expected" not in r.message.split("[")[0].replace(
        "expected shape", ""
    )

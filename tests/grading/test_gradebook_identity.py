"""Issue 19, class 11: no two gradebook rows that no one can tell apart.

Student folders whose names differ only by an invisible character (zero-width space, a bidi
control), by compatibility forms (full-width letters, a no-break space) or that become the same
cell after the spreadsheet-formula escaping are refused with status "rejected" and a reason in
grading.json; plain names (also non-ASCII ones) are kept.
"""

from __future__ import annotations

import json
import sys

import pytest

from mha_grader.outputs import check_student_name, collisions, identity
from mha_grader.sandbox import isolation

NAMES = {  # folder -> a word its refusal must hold (None: kept)
    "alice": None,
    "alice\u200b": "invisible",
    "bo\u202eb": "invisible",
    "carl": "reads the same",
    "\uff43\uff41\uff52\uff4c": "reads the same",  # full-width "carl"
    "dana lee": "reads the same",
    "dana\u00a0lee": "reads the same",
    "=sum": "reads the same",
    "'=sum": "reads the same",
    "José": None,
    "李雷": None,
}


def test_identity_and_collisions():
    assert (
        identity("\uff43arl") == "carl" and identity("=x") == "'=x" and identity(" a  b ") == "a b"
    )
    assert check_student_name("alice\u200b") and check_student_name("x\u2066y")
    assert check_student_name("José") is None
    clash = collisions(list(NAMES))
    assert set(clash) == {n for n, w in NAMES.items() if w == "reads the same"}, clash


def test_grade_class_rejects_names_no_one_can_tell_apart(tmp_path):
    if not sys.platform.startswith("linux") or (
        isolation.bwrap_problem() and isolation.user_runtime_problem()
    ):
        pytest.skip("class grading needs the OS sandbox")
    from mha_grader.classroom import grade_class

    sub = tmp_path / "sub"
    for name in NAMES:
        (sub / name).mkdir(parents=True)  # no notebooks: nothing to run, only the layout
    grade_class(sub, tmp_path / "out", workers=1, seed=1, progress=False)
    rejected = json.loads((tmp_path / "out" / "grading.json").read_text())["rejected"]
    for name, word in NAMES.items():
        if word is None:
            assert name not in rejected, (name, rejected.get(name))
        else:
            assert name in rejected and word in " ".join(rejected[name]), (name, rejected.get(name))

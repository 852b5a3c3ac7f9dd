"""The instructor's re-run (issue #31, "Done when"): a realistic class graded with the guide's
commands (docs/instructor_guide.md §4, "The class report", "Copies"): ten students over five
exercises, with the gallery's planted mistakes, a renamed file, a copy of a published solution, a
cascade, a student with two mistakes, an untouched stub and nothing handed in.

What each piece does alone is tested beside it (test_collect, test_merge, test_class_report,
test_similarity, test_cascades); this runs them together, once, as an instructor would.
"""

from __future__ import annotations

import csv
import json
import runpy
import shutil
from pathlib import Path

import pytest
from grading_helpers import EXERCISES, MASK_AFTER_SOFTMAX, SOLUTIONS, build, course_cli

from mha_grader.registry import items_for, resolve

GALLERY = Path(__file__).parent / "gallery"
ASSIGNMENT = ("ex01", "ex02", "ex03", "ex04", "ex05")
POINTS = sum(it.points for ex in ASSIGNMENT for it in items_for(ex))


def _gallery(name: str) -> dict:
    return runpy.run_path(str(GALLERY / f"{name}.py"))


# student -> what they hand in: (exercise, gallery case or "solution"/"stub", file name or None)
CLASS = {
    "alice": [("ex01", "solution", None)],  # a copy of the published solution
    "bob": [("ex02", "ex02_no_scaling", None)],  # a cascade: task 1 wrong, task 4 calls it
    "carol": [("ex01", "ex01_softmax_wrong_axis", "Downloads/hw1 (1).ipynb")],  # renamed
    "dave": [],  # nothing handed in
    "erin": [("ex04", "ex04_split_with_view", None)],  # a cascade in ex04
    "frank": [("ex03", "ex03_scale_by_e", None)],
    "grace": [("ex05", "ex05_causal_inverted", None)],
    "heidi": [("ex02", "stub", None)],  # the exercise untouched
    "ivan": [("ex02", "two", None)],  # no scaling AND the mask after the softmax
    "judy": [("ex01", "ex01_scores_transposed", None), ("ex03", "ex03_scale_by_e", None)],
}
# planted: (item, mistake id) -> students
PLANTED = {
    ("ex01_softmax", "wrong_axis"): 1,
    ("ex02_scaled_scores", "no_scaling"): 2,
    ("ex02_attention", "mask_after_softmax"): 1,
    ("ex04_split_heads", "split_with_view"): 1,
    ("ex03_head_forward", "scaled_by_1_sqrt_e"): 2,
    ("ex05_offset_mask", "inverted"): 1,
}


def _ok(*args) -> str:
    proc = course_cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _hand_in(sub: Path) -> None:
    for student, work in CLASS.items():
        (sub / student).mkdir(parents=True)
        for ex, case, name in work:
            stem = resolve(ex)
            dest = sub / student / (name or f"{stem}.ipynb")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if case in ("solution", "stub"):
                shutil.copy(
                    (SOLUTIONS if case == "solution" else EXERCISES) / f"{stem}.ipynb", dest
                )
            elif case == "two":
                replace = {
                    **_gallery("ex02_no_scaling")["REPLACE"],
                    "ex02_attention": MASK_AFTER_SOFTMAX,
                }
                build(ex, dest, replace=replace)
            else:
                build(ex, dest, replace=_gallery(case)["REPLACE"])


def _grades(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return sorted(csv.DictReader(f), key=lambda r: r["student"])


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rerun")
    sub = tmp / "submissions"
    _hand_in(sub)
    common = ("--assignment", ",".join(ASSIGNMENT), "--key-file", tmp / "class.key")
    common += ("--no-progress", "--timeout", "15")
    _ok("grade", sub, "--out", tmp / "graded", *common)
    for k in (1, 2):
        _ok("grade", sub, "--out", tmp / f"s{k}", "--shard", f"{k}/2", *common)
    return tmp


def _results(out: Path, student: str) -> dict[str, dict]:
    doc = json.loads((out / student / "results.json").read_text(encoding="utf-8"))
    return {t["name"]: t for t in doc["tests"]}


def test_no_silent_zero_and_totals_out_of_the_assignment(rerun):
    for student in CLASS:
        tests = _results(rerun / "graded", student)
        assert sum(float(t["max_score"]) for t in tests.values()) == POINTS, student
        for name, t in tests.items():
            if float(t["score"]) == 0:  # every lost item says why
                assert t["status"] == "failed" and t["output"].strip(), (student, name, t)
    meta = json.loads((rerun / "graded" / "grading.json").read_text(encoding="utf-8"))
    assert meta["assignment"] and len(_grades(rerun / "graded")) == len(CLASS)


def test_a_cascade_costs_one_item(rerun):
    for student, earlier in (("bob", "ex02_scaled_scores"), ("erin", "ex04_split_heads")):
        lost = {
            n for n, t in _results(rerun / "graded", student).items() if t["status"] != "passed"
        }
        ex = earlier.split("_")[0]
        assert {n for n in lost if n.startswith(ex)} == {earlier}, (student, lost)
    ivan = _results(rerun / "graded", "ivan")
    assert ivan["ex02_attention"]["extra_data"]["mistake"] == "mask_after_softmax"


def test_the_class_report_counts_the_planted_mistakes(rerun):
    rep = json.loads((rerun / "graded" / "class_report.json").read_text(encoding="utf-8"))
    counts = {(st["item"], m): c for st in rep["items"] for m, c in st["mistakes"].items()}
    assert {k: counts.get(k, 0) for k in PLANTED} == PLANTED, counts


def test_the_copy_is_flagged(rerun):
    pytest.importorskip("copydetect", reason="copydetect is in the dev and instructor extras")
    out = rerun / "similarity"
    _ok("similarity", rerun / "submissions", "--out", out, "--assignment", ",".join(ASSIGNMENT))
    with open(out / "similarity.csv", newline="") as f:
        pairs = {(r["student"], r["other_kind"]) for r in csv.DictReader(f)}
    assert ("alice", "published solution") in pairs, pairs


def test_two_shards_merge_equal_to_the_single_run_and_a_part_is_refused(rerun):
    _ok("merge", rerun / "s1", rerun / "s2", "--out", rerun / "merged")
    assert _grades(rerun / "merged") == _grades(rerun / "graded")
    proc = course_cli("merge", rerun / "s1", "--out", rerun / "part")
    assert proc.returncode == 2 and "incomplete shard set" in proc.stderr, proc.stderr

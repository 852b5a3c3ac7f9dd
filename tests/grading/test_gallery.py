"""The gallery: each deliberately wrong implementation loses exactly the intended items, with the
intended status and message; every other item keeps full marks (see docs/grading.md)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from grading_helpers import build, grade_many

from mha_course.grading import items_for

GALLERY = sorted((Path(__file__).parent / "gallery").glob("ex*.py"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gallery")
    jobs = {}
    for case in GALLERY:
        spec = runpy.run_path(str(case))
        path = build(spec["NOTEBOOK"], tmp / case.stem / "sub.ipynb", replace=spec["REPLACE"])
        jobs[case.stem] = (path, spec["NOTEBOOK"])
    return grade_many(jobs)


@pytest.mark.parametrize("case", GALLERY, ids=[c.stem for c in GALLERY])
def test_gallery_case(case, graded):
    spec = runpy.run_path(str(case))
    results, _ = graded[case.stem]
    assert set(spec["EXPECT"]) <= set(results), f"unknown grade ids in EXPECT: {spec['EXPECT']}"
    for item in items_for(spec["NOTEBOOK"]):
        r = results[item.id]
        if item.id in spec["EXPECT"]:
            status, text = spec["EXPECT"][item.id]
            assert (r.points, r.status) == (0.0, status), f"{item.id}: {r.status}: {r.message}"
            assert text in r.message, f"{item.id}: {r.message!r} lacks {text!r}"
        else:
            assert r.passed, f"{item.id} should keep its marks: {r.status}: {r.message}"


def test_gallery_covers_the_common_mistakes():
    names = {c.stem for c in GALLERY}
    for needed in (
        "no_scaling",
        "wrong_axis",
        "mask_inverted",
        "off_by_one",
        "mask_after_softmax",
        "overflow",
        "float64",
        "shape",
    ):
        assert any(needed in n for n in names), needed


INVERTED = [c for c in GALLERY if "inverted" in c.stem or c.stem == "ex06_fix_padded_unchanged"]


@pytest.mark.parametrize("seed", [12345, 1, 2])
def test_inverted_masks_are_named_on_other_seeds(seed, tmp_path):
    """An inverted mask blocks some query's every key on some inputs (the public seed 12345 among them):
    torch.softmax gives NaN there, where the course's softmax gives 0. The feedback still names the
    mistake (ex02's said "non-finite: 4 NaN/inf value(s)")."""
    jobs = {}
    for case in INVERTED:
        spec = runpy.run_path(str(case))
        jobs[case.stem] = (
            build(spec["NOTEBOOK"], tmp_path / case.stem / "sub.ipynb", replace=spec["REPLACE"]),
            spec["NOTEBOOK"],
        )
    graded = grade_many(jobs, seed=seed)
    wrong = []
    for case in INVERTED:
        spec = runpy.run_path(str(case))
        results, _ = graded[case.stem]
        for item_id, (_, text) in spec["EXPECT"].items():
            r = results[item_id]
            if r.passed or text not in r.message:
                wrong.append((case.stem, item_id, r.status, r.message))
    assert not wrong, wrong

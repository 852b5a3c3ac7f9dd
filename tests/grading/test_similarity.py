"""`mha-course similarity` (issue 31, item 3): a verbatim copy of a published solution scored full
marks and nothing said so. copydetect compares each exercise's code student <-> student and
student <-> the published solutions and the package's source, the given stub excluded."""

from __future__ import annotations

import csv
import inspect
import shutil
import subprocess
import sys

import pytest
from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_grader.submissions import make_submission

pytest.importorskip("copydetect", reason="copydetect is in the dev and instructor extras")

EX01 = "ex01_dot_product_attention"


def _cli(*args, pre: str = "pass") -> subprocess.CompletedProcess:
    code = f"import sys; {pre}; from mha_course.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_copies_of_solutions_package_and_peers_are_found(tmp_path):
    from mha_course.ops import numpy_attention

    sub = tmp_path / "submissions"
    (sub / "alice").mkdir(parents=True)
    shutil.copy(
        SOLUTIONS / f"{EX01}.ipynb", sub / "alice" / f"{EX01}.ipynb"
    )  # the published solution
    (sub / "bob").mkdir()
    shutil.copy(EXERCISES / f"{EX01}.ipynb", sub / "bob" / f"{EX01}.ipynb")  # the stub, untouched
    (sub / "carol" / "Downloads").mkdir(parents=True)  # alice's notebook, renamed and nested
    shutil.copy(sub / "alice" / f"{EX01}.ipynb", sub / "carol" / "Downloads" / "hw1 (1).ipynb")
    pasted = inspect.getsource(numpy_attention.softmax)  # the course package's own softmax
    make_submission(
        EXERCISES / f"{EX01}.ipynb",
        sub / "dave" / f"{EX01}.ipynb",
        replace={"ex01_softmax": pasted},
    )
    out = tmp_path / "sim"
    proc = _cli("similarity", sub, "--out", out, "--assignment", "ex01")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out / "similarity.csv", newline="") as f:
        pairs = {(r["student"], r["other"]): r for r in csv.DictReader(f)}
    solution = f"solutions/{EX01}.ipynb"
    for a, b, kind in (
        ("alice", solution, "published solution"),
        ("carol", solution, "published solution"),
        ("alice", "carol", "student"),
        ("dave", "mha_course/ops", "package source"),
    ):
        assert (a, b) in pairs, (a, b, sorted(pairs))
        assert (
            pairs[(a, b)]["other_kind"] == kind and float(pairs[(a, b)]["share_of_student"]) >= 0.5
        )
    assert not any("bob" in pair for pair in pairs), pairs  # the given stub does not count
    assert float(pairs[("alice", solution)]["share_of_student"]) > 0.95
    page = (out / pairs[("alice", solution)]["regions_page"]).read_text()
    assert "highlight-red" in page  # copydetect's page marks the matching regions
    assert "carol" in (out / "similarity.html").read_text()


def test_similarity_errors_name_the_argument(tmp_path):
    (tmp_path / "s").mkdir()
    proc = _cli("similarity", tmp_path / "s", "--out", tmp_path / "o", "--threshold", "2")
    assert (
        proc.returncode == 2
        and "expected a share between 0 and 1" in proc.stderr
        and "'2'" in proc.stderr
    )
    proc = _cli("similarity", tmp_path / "nowhere", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "submissions: expected a folder" in proc.stderr
    proc = _cli(
        "similarity",
        tmp_path / "s",
        "--out",
        tmp_path / "o",
        pre="sys.modules['copydetect'] = None",
    )
    assert proc.returncode == 2 and "pip install 'mha-course[instructor]'" in proc.stderr, (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr

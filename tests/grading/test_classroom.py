"""`mha-course grade` on a class (solutions, untouched exercises, hostile notebooks) in two
shards, then `mha-course merge`: the expected gradebook, Gradescope JSON and feedback files."""

from __future__ import annotations

import csv
import json
import shutil
import stat
import subprocess
import sys

import pytest
from grading_helpers import EXERCISES, ROOT, SOLUTIONS, build

from mha_course.grading import all_items
from mha_grader.keys import fingerprint

EX01, EX02 = "ex01_dot_product_attention.ipynb", "ex02_scaled_dot_product_attention.ipynb"

# carol's ex02 keeps: scaled scores + additive mask (1 + 1), and every item added after the first
# four (her sabotage sits in the causal-mask and attention functions)
CAROL = 2 + sum(
    it.points
    for it in all_items()
    if it.notebook.startswith("ex02_")
    and it.id
    not in {"ex02_scaled_scores", "ex02_causal_mask", "ex02_additive_mask", "ex02_attention"}
)


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    sub = tmp / "submissions"
    for name, src in (("alice", SOLUTIONS), ("bob", EXERCISES)):
        (sub / name).mkdir(parents=True)
        for nb in (EX01, EX02):
            shutil.copy(src / nb, sub / name / nb)
    # carol: no ex01; ex02 leaves files behind, exits the process in one function, uses torch's SDPA
    build(
        "ex02",
        sub / "carol" / EX02,
        extra=[
            (2, "open('grades.csv', 'w').write('carol,999')\nopen('results.json', 'w').write('{}')")
        ],
        replace={
            "ex02_causal_mask": "def make_causal_mask(L, S):\n    import os\n    os._exit(0)",
            "ex02_attention": "def attention(q, k, v, m=None):\n"
            "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)",
        },
    )
    # dave: a broken ex01 file, a correct ex02
    (sub / "dave").mkdir()
    (sub / "dave" / EX01).write_text("{ this is not json")
    shutil.copy(SOLUTIONS / EX02, sub / "dave" / EX02)
    outs = []
    for k in (1, 2):
        out = tmp / f"shard{k}"
        _cli(
            "grade",
            str(sub),
            "--out",
            str(out),
            "--key-file",
            str(tmp / "run.key"),
            "--workers",
            "2",
            "--shard",
            f"{k}/2",
            "--no-progress",
            "--timeout",
            "8",
        )
        outs.append(out)
    _cli("merge", *map(str, outs), "--out", str(tmp / "all"))
    with open(tmp / "all" / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    return tmp / "all", rows, sub


def test_gradebook_columns_and_totals(gradebook):
    out, rows, _ = gradebook
    with open(out / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    ids = [it.id for it in all_items()]
    assert header == ["student", "total", *ids]
    assert sorted(rows) == ["alice", "bob", "carol", "dave"]
    ex01_02 = [it for it in all_items() if it.notebook in (EX01[:-6], EX02[:-6])]
    assert float(rows["alice"]["total"]) == sum(it.points for it in ex01_02)
    assert float(rows["bob"]["total"]) == 0
    assert (
        float(rows["carol"]["total"]) == CAROL
    )  # scaled scores + additive mask + the later ex02 items
    assert float(rows["dave"]["total"]) == sum(
        it.points for it in ex01_02 if it.notebook == EX02[:-6]
    )  # all of ex02


def test_results_json_is_gradescope_schema(gradebook):
    out, _, _ = gradebook
    res = json.loads((out / "carol" / "results.json").read_text())
    assert set(res) >= {"score", "tests"} and res["score"] == CAROL
    by = {t["name"]: t for t in res["tests"]}
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output"}
        assert t["status"] in ("passed", "failed")
    assert by["ex01_softmax"]["output"].startswith("missing notebook")
    assert by["ex02_causal_mask"]["output"].startswith("crashed")
    assert by["ex02_attention"]["output"].startswith("forbidden API")
    dave = {t["name"]: t for t in json.loads((out / "dave" / "results.json").read_text())["tests"]}
    assert dave["ex01_attend"]["output"].startswith("invalid notebook")


def test_feedback_is_readable(gradebook):
    out, _, _ = gradebook
    text = (out / "bob" / "feedback.md").read_text()
    total = sum(it.points for it in all_items())
    assert (
        f"Score: 0 / {total:g}" in text and "not implemented" in text and "missing notebook" in text
    )


def test_nothing_a_submission_leaves_behind_reaches_the_output(gradebook):
    out, _, sub = gradebook
    assert not (out / "carol" / "grades.csv").exists()
    assert sorted(p.name for p in (out / "carol").iterdir()) == ["feedback.md", "results.json"]
    assert sorted(p.name for p in (sub / "carol").iterdir()) == [EX02]


def test_shards_share_one_private_key_that_no_output_holds(gradebook):
    out, _, _ = gradebook
    key_file = out.parent / "run.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600  # created by the first shard, reused
    key = bytes.fromhex(key_file.read_text().strip())
    meta = json.loads((out / "grading.json").read_text())
    assert meta["inputs"] == "secret key" and meta["key_fingerprint"] == fingerprint(key)
    for f in out.rglob("*"):
        if f.is_file():
            assert key.hex() not in f.read_text(errors="replace"), f

"""`mha-course merge` refuses what is not one gradebook, and puts regrades back (issue 31, item 7):
an incomplete shard set (1 of 2 gave exit 0 with part of the class), shards graded with different
keys (noted only in grading.json), a shard run without --key-file (silently its own key); and
`merge --replace` with a record of what changed."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest
from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_grader.registry import notebooks

EX01 = "ex01_dot_product_attention"
POINTS = sum(it.points for it in notebooks()[EX01])


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ok(*args) -> str:
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _refused(*args) -> str:
    proc = _cli(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (
        proc.returncode,
        proc.stdout + proc.stderr,
    )
    return proc.stderr


def _totals(out) -> dict[str, float]:
    with open(out / "grades.csv", newline="") as f:
        return {r["student"]: float(r["total"]) for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("merge")
    sub = tmp / "submissions"
    for name, src in (("alice", SOLUTIONS), ("bob", EXERCISES), ("carol", SOLUTIONS)):
        (sub / name).mkdir(parents=True)
        shutil.copy(src / f"{EX01}.ipynb", sub / name / f"{EX01}.ipynb")
    common = ("--assignment", "ex01", "--no-progress", "--timeout", "15")
    for k in (1, 2):
        _ok(
            "grade",
            sub,
            "--out",
            tmp / f"s{k}",
            "--key-file",
            tmp / "class.key",
            "--shard",
            f"{k}/2",
            *common,
        )
    _other_key(tmp / "s2", tmp / "s2-other")
    return tmp, sub, common


def _other_key(part, dest) -> None:
    """``part`` as if graded with another key (what grading.json records of it: its fingerprint)."""
    shutil.copytree(part, dest)
    meta = json.loads((dest / "grading.json").read_text())
    assert meta["inputs"] == "secret key"
    meta["key_fingerprint"] = "0123456789abcdef"
    (dest / "grading.json").write_text(json.dumps(meta))


def test_shard_without_key_file_is_refused(tmp_path):
    (tmp_path / "s").mkdir()
    err = _refused("grade", tmp_path / "s", "--out", tmp_path / "o", "--shard", "1/2")
    assert "--shard 1/2 needs --key-file" in err
    assert not (tmp_path / "o.key").exists() and not (tmp_path / "o").exists()


def test_incomplete_or_inconsistent_shards_are_refused(shards):
    tmp, _, _ = shards
    err = _refused("merge", tmp / "s1", "--out", tmp / "m1")
    assert "incomplete shard set: got 1 of 2 shard(s); missing 2/2" in err
    err = _refused("merge", tmp / "s1", tmp / "s2-other", "--out", tmp / "m2")
    assert "different inputs" in err and "--key-file" in err
    err = _refused("merge", tmp / "s1", tmp / "s1", tmp / "s2", "--out", tmp / "m3")
    assert "shard 1/2 is given twice" in err
    err = _refused("merge", tmp / "s1", tmp / "nowhere", "--out", tmp / "m4")
    assert "parts: expected OUT folders" in err and "nowhere" in err
    for m in ("m1", "m2", "m3"):
        assert not (tmp / m / "grades.csv").exists()


def test_merge_then_replace_a_regrade(shards):
    tmp, sub, common = shards
    _ok("merge", tmp / "s1", tmp / "s2", "--out", tmp / "all")
    assert _totals(tmp / "all") == {"alice": POINTS, "bob": 0, "carol": POINTS}
    # bob's notebook is fixed (say, a grading error was found): regrade only him with the class's key
    shutil.copy(SOLUTIONS / f"{EX01}.ipynb", sub / "bob" / f"{EX01}.ipynb")
    _ok(
        "grade",
        sub,
        "--out",
        tmp / "bob-again",
        "--key-file",
        tmp / "class.key",
        "--students",
        "bob",
        *common,
    )
    err = _refused("merge", tmp / "all", tmp / "bob-again", "--out", tmp / "nope")
    assert "graded only some students" in err and "--replace" in err
    out = _ok("merge", tmp / "all", tmp / "bob-again", "--replace", "--out", tmp / "v2")
    assert f"replaced bob: total 0 -> {POINTS:g}" in out
    assert _totals(tmp / "v2") == {"alice": POINTS, "bob": POINTS, "carol": POINTS}
    assert _totals(tmp / "all")["bob"] == 0  # the old gradebook is left as it was
    with open(tmp / "v2" / "changes.csv", newline="") as f:
        changes = list(csv.DictReader(f))
    assert {c["student"] for c in changes} == {"bob"} and len(changes) == len(notebooks()[EX01])
    assert all(c["before"] == "0" and float(c["after"]) > 0 for c in changes)
    meta = json.loads((tmp / "v2" / "grading.json").read_text())
    assert meta["replaced"]["bob"]["total after"] == POINTS
    assert json.loads((tmp / "v2" / "bob" / "results.json").read_text())["score"] == POINTS
    # a regrade with another key is refused
    _other_key(tmp / "bob-again", tmp / "bob-other")
    err = _refused("merge", tmp / "all", tmp / "bob-other", "--replace", "--out", tmp / "v3")
    assert "different inputs" in err


def _other_policy(part, dest) -> None:
    """``part`` as if graded under another version of the items (its recorded policy)."""
    shutil.copytree(part, dest)
    meta = json.loads((dest / "grading.json").read_text())
    assert meta["policy"].startswith("sha256:")
    meta["policy"] = "sha256:" + "0" * 64
    (dest / "grading.json").write_text(json.dumps(meta))


def test_a_regrade_under_another_version_of_the_items_is_refused(shards):
    """The same item ids can grade differently after an upgrade (a case added, a forbidden list
    grown): a regrade made so is not merged into a gradebook made under the old items."""
    tmp, _, _ = shards
    _other_policy(tmp / "s2", tmp / "s2-newer")
    err = _refused("merge", tmp / "s1", tmp / "s2-newer", "--out", tmp / "m5")
    assert "another version of the items" in err and "regrade every folder" in err
    assert not (tmp / "m5" / "grades.csv").exists()
    policy = json.loads((tmp / "s1" / "grading.json").read_text())["policy"]
    assert json.loads((tmp / "s2" / "grading.json").read_text())["policy"] == policy
    _ok("merge", tmp / "s1", tmp / "s2", "--out", tmp / "m6")
    assert json.loads((tmp / "m6" / "grading.json").read_text())["policy"] == policy


def test_the_policy_fingerprint_follows_cases_lists_points_and_tolerances():
    import dataclasses

    from mha_grader import policy

    items = notebooks()[EX01]
    base = policy.fingerprint(items)
    assert base == policy.fingerprint(list(items)) and base.startswith("sha256:")
    first = items[0]
    changed = {
        "a case added": dataclasses.replace(
            first, make_cases=lambda rng, f=first.make_cases: [*f(rng), *f(rng)[:1]]
        ),
        "a forbidden name": dataclasses.replace(first, forbidden=(*first.forbidden, "x.y")),
        "points": dataclasses.replace(first, points=first.points + 1),
        "a tolerance": dataclasses.replace(first, atol=first.atol * 2 + 1e-9),
    }
    for what, item in changed.items():
        assert policy.fingerprint([item, *items[1:]]) != base, what

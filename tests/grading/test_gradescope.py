"""The REAL classroom/gradescope/run_autograder, run in temporary folders laid out like
/autograder (AUTOGRADER_ROOT) with this checkout's environment as the installed course (MHA_VENV).

Each results.json is validated against Gradescope's documented results format
(https://gradescope-autograders.readthedocs.io/en/latest/specs/, "Output format"). Uploads: a
correct submission, untouched stubs, an empty upload, a corrupt notebook, a browser-renamed file,
an upload nested in folders, and a submission that attacks the recipe (writes its own score,
the installed course, a process that outlives the run, looks for the key). Inputs: the key in
source/key and the ``id`` of submission_metadata.json
(https://gradescope-autograders.readthedocs.io/en/latest/submission_metadata/) make each
submission's inputs; another id gives other inputs, the same id the same; no key, no grade.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from grading_helpers import EXERCISES, ROOT, SOLUTIONS, require_user_mode

from mha_course.grading import items_for
from mha_grader.keys import StudentInputs, fingerprint

RECIPE = ROOT / "classroom" / "gradescope"
EX01, EX02 = "ex01_dot_product_attention", "ex02_scaled_dot_product_attention"
POINTS = {stem: sum(it.points for it in items_for(stem)) for stem in (EX01, EX02)}
IDS = {stem: [it.id for it in items_for(stem)] for stem in (EX01, EX02)}
KEY = bytes.fromhex(
    "5e" * 8 + "c4e7" * 4 + "0123456789abcdef" * 2
)  # the instructor's key (test only)
SUBMISSION = 4242001  # Gradescope's submission id (an int in submission_metadata.json)

# --- Gradescope's results format, from the spec's "Output format" section --------------------
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
TOP_KEYS = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
TEST_KEYS = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def schema_problems(text: str) -> list[str]:
    """What in ``text`` does not follow Gradescope's results.json format (empty: it does).
    Besides the spec, the course's own promise: every test has name, score, max_score, status,
    output and visibility, and the top-level score is the sum of the tests' scores."""

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    try:
        res = json.loads(text, parse_constant=no_constants)
    except ValueError as e:
        return [f"not JSON: {e}"]
    if not isinstance(res, dict):
        return ["the top level is not an object"]
    bad = [f"unknown top-level key {k!r}" for k in set(res) - TOP_KEYS]
    if "score" not in res and "tests" not in res:
        bad.append("neither a score nor tests")
    if "score" in res and not _number(res["score"]):
        bad.append(f"score {res['score']!r} is not a number")
    if "execution_time" in res and not (
        _number(res["execution_time"]) and res["execution_time"] >= 0
    ):
        bad.append(f"execution_time {res['execution_time']!r} is not seconds")
    for k in ("output",):
        if k in res and not isinstance(res[k], str):
            bad.append(f"{k} is not a string")
    for k in ("visibility", "stdout_visibility"):
        if k in res and res[k] not in VISIBILITY:
            bad.append(f"{k} {res[k]!r} not in {sorted(VISIBILITY)}")
    if "extra_data" in res and not isinstance(res["extra_data"], dict):
        bad.append("extra_data is not an object")
    tests = res.get("tests", [])
    if not isinstance(tests, list):
        return [*bad, "tests is not a list"]
    for i, t in enumerate(tests):
        where = f"tests[{i}]"
        if not isinstance(t, dict):
            bad.append(f"{where} is not an object")
            continue
        bad += [f"{where}: unknown key {k!r}" for k in set(t) - TEST_KEYS]
        bad += [
            f"{where}: no {k}"
            for k in ("name", "score", "max_score", "status", "output", "visibility")
            if k not in t
        ]
        if not (
            _number(t.get("score"))
            and _number(t.get("max_score"))
            and 0 <= t["score"] <= t["max_score"]
        ):
            bad.append(f"{where}: score {t.get('score')!r} / max_score {t.get('max_score')!r}")
        if t.get("status") not in {"passed", "failed"}:
            bad.append(f"{where}: status {t.get('status')!r}")
        if not isinstance(t.get("name"), str) or not isinstance(t.get("output"), str):
            bad.append(f"{where}: name and output must be strings")
        if t.get("visibility") not in VISIBILITY:
            bad.append(f"{where}: visibility {t.get('visibility')!r}")
        if "tags" in t and not (
            isinstance(t["tags"], list) and all(isinstance(x, str) for x in t["tags"])
        ):
            bad.append(f"{where}: tags must be a list of strings")
    if (
        tests
        and _number(res.get("score"))
        and abs(res["score"] - sum(t.get("score", 0) for t in tests if isinstance(t, dict))) > 1e-9
    ):
        bad.append("score is not the sum of the tests' scores")
    return bad


def test_the_schema_check_can_fail():
    good = {
        "score": 1.0,
        "tests": [
            {
                "name": "a",
                "score": 1.0,
                "max_score": 1.0,
                "status": "passed",
                "output": "",
                "visibility": "visible",
            }
        ],
    }
    assert schema_problems(json.dumps(good)) == []
    for broken in (
        {**good, "score": 2.0},
        {**good, "visibility": "sometimes"},
        {**good, "tests": [{}]},
        {**good, "tests": [{**good["tests"][0], "score": 3.0}]},
        {**good, "scores": 1},
    ):
        assert schema_problems(json.dumps(broken)), broken
    assert schema_problems('{"score": NaN}')


# --- running the recipe -------------------------------------------------------------------------


def solution_text(stem: str) -> str:
    return (SOLUTIONS / f"{stem}.ipynb").read_text(encoding="utf-8")


def run_autograder(
    tmp: Path,
    files: dict[str, str],
    isolation: str | None = None,
    returncode: int = 0,
    submission: int | None = SUBMISSION,
    key: bytes | str | None = KEY,
    source: dict[str, str] | None = None,
    venv: Path | None = None,
) -> dict:
    """Lay out ``tmp`` like /autograder (``source/key`` unless ``key`` is None: bytes in hex,
    a str as it is; ``submission_metadata.json`` with ``id`` = ``submission`` unless None;
    ``source`` more files for source/; ``venv`` the installed course, default this one), upload ``files`` (relative path -> text), run the real
    script; returns results.json (checked against the schema) plus the run's log."""
    root = tmp / "autograder"
    (root / "source").mkdir(parents=True)
    for name in ("run_autograder", "setup.sh", "autograder.py"):
        shutil.copy(RECIPE / name, root / "source" / name)
    shutil.copy(RECIPE / "run_autograder", root / "run_autograder")  # where Gradescope puts it
    if key is not None:
        (root / "source" / "key").write_text(key.hex() + "\n" if isinstance(key, bytes) else key)
        (root / "source" / "key").chmod(0o644)  # as unzipped; the recipe makes it 0600
    if submission is not None:  # the fields of Gradescope's example, abridged
        (root / "submission_metadata.json").write_text(
            json.dumps(
                {
                    "id": submission,
                    "created_at": "2026-12-01T10:00:00.000000-08:00",
                    "assignment": {"id": 25828, "title": "Exercises 1-2"},
                    "submission_method": "upload",
                    "users": [{"email": "student@example.com", "id": 1234, "name": "Student User"}],
                    "previous_submissions": [],
                }
            )
        )
    (root / "source" / "assignment").write_text("ex01 ex02\n")
    for name, text in (source or {}).items():
        (root / "source" / name).write_text(text)
    for rel, text in files.items():
        (root / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / rel).write_text(text, encoding="utf-8")
    (root / "submission").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MHA_GRADER_")}
    env.update(AUTOGRADER_ROOT=str(root), MHA_VENV=str(venv or Path(sys.executable).parent.parent))
    if isolation:
        env["MHA_GRADER_ISOLATION"] = isolation
    proc = subprocess.run(
        ["bash", str(root / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == returncode, log[-4000:]
    text = (root / "results" / "results.json").read_text(encoding="utf-8")
    assert schema_problems(text) == [], (schema_problems(text), log[-2000:])
    assert KEY.hex() not in text and KEY.hex() not in log
    return {**json.loads(text), "_root": root, "_log": log}


def by_name(res: dict) -> dict[str, dict]:
    return {t["name"]: t for t in res["tests"]}


def test_correct_submission_scores_full(tmp_path):
    res = run_autograder(
        tmp_path, {f"{EX01}.ipynb": solution_text(EX01), f"{EX02}.ipynb": solution_text(EX02)}
    )
    assert set(by_name(res)) == set(IDS[EX01] + IDS[EX02])  # only the assignment's items
    assert res["score"] == POINTS[EX01] + POINTS[EX02]
    assert all(t["status"] == "passed" for t in res["tests"])
    assert res["extra_data"]["isolation"] in {"bwrap", "user"}
    assert res["extra_data"]["inputs"] == "secret key"
    assert res["extra_data"]["key_fingerprint"] == fingerprint(KEY)
    assert res["extra_data"]["submission"] == str(SUBMISSION)


def test_stubs_score_zero(tmp_path):
    res = run_autograder(
        tmp_path, {f"{s}.ipynb": (EXERCISES / f"{s}.ipynb").read_text() for s in (EX01, EX02)}
    )
    assert res["score"] == 0
    assert {t["output"].split(":")[0] for t in res["tests"]} == {"not implemented"}


def test_empty_upload(tmp_path):
    res = run_autograder(tmp_path, {})
    assert res["score"] == 0 and len(res["tests"]) == len(IDS[EX01] + IDS[EX02])
    assert {t["output"].split(":")[0] for t in res["tests"]} == {"missing notebook"}
    assert "no exercise notebook" in res["output"]


def test_corrupt_notebook(tmp_path):
    res = run_autograder(
        tmp_path, {f"{EX01}.ipynb": solution_text(EX01), f"{EX02}.ipynb": '{"cells": [trunc'}
    )
    tests = by_name(res)
    assert res["score"] == POINTS[EX01]
    assert all(tests[i]["output"].startswith("invalid notebook") for i in IDS[EX02])


def test_browser_renamed_file(tmp_path):
    res = run_autograder(tmp_path, {f"{EX02} (1).ipynb": solution_text(EX02)})
    tests = by_name(res)
    assert all(tests[i]["status"] == "passed" for i in IDS[EX02]), res["tests"]
    assert res["score"] == POINTS[EX02]
    assert f"graded {EX02} (1).ipynb as {EX02}.ipynb" in res["output"]


def test_upload_nested_in_a_folder(tmp_path):
    res = run_autograder(
        tmp_path,
        {
            f"my work/week 1/{EX01}.ipynb": solution_text(EX01),
            "my work/notes.txt": "not a notebook",
        },
    )
    assert res["score"] == POINTS[EX01]
    assert all(by_name(res)[i]["status"] == "passed" for i in IDS[EX01])
    assert f"graded my work/week 1/{EX01}.ipynb" in res["output"]


def test_no_isolation_means_no_grade(tmp_path):
    """Where the grader has no sandbox it refuses; the recipe then says so and scores nothing."""
    res = run_autograder(
        tmp_path, {f"{EX01}.ipynb": solution_text(EX01)}, isolation="none", returncode=2
    )
    assert res["score"] == 0 and res["tests"] == []
    assert "could not grade" in res["output"] and "refusing" in res["_log"]


def test_collect_picks_one_file_per_exercise(tmp_path):
    """The collection step alone (no grading): names, copies, folders, links, other files. Of two
    different copies the one with more work in it wins (the course's stated rule,
    ``mha_grader/collect.py``), not the most recently modified."""
    spec = importlib.util.spec_from_file_location("gradescope_autograder", RECIPE / "autograder.py")
    autograder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(autograder)
    up = tmp_path / "upload"
    stub, done = (EXERCISES / f"{EX01}.ipynb").read_text(), solution_text(EX01)
    files = {
        f"hw/{EX01} (2).ipynb": done,
        f"Copy of {EX01}.ipynb": stub,
        "ex99_unknown.ipynb": "",
        f"hw/.ipynb_checkpoints/{EX02}-checkpoint.ipynb": "",
        "alex02.ipynb": "",
        f"{EX02}.txt": "",
    }
    for i, (rel, text) in enumerate(files.items()):  # the stub is the newest file
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text(text)
        os.utime(up / rel, (1_000_000 + i, 1_000_000 + i))
    (up / f"{EX02}.ipynb").symlink_to(SOLUTIONS / f"{EX02}.ipynb")
    got = autograder.collect(up, tmp_path / "dest", assignment=None)
    assert got["taken"] == {
        EX01: f"hw/{EX01} (2).ipynb"
    }  # the copy with work in it; no link followed
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == [f"{EX01}.ipynb"]
    assert (tmp_path / "dest" / f"{EX01}.ipynb").read_text() == done
    notes = "\n".join(got["notes"])
    assert "ex01: 2 different files compete" in notes and "fewest NotImplementedError" in notes
    for rel in (
        f"Copy of {EX01}.ipynb",
        "ex99_unknown.ipynb",
        "alex02.ipynb",
        f"{EX02}.ipynb",
        f"{EX02}.txt",
        "hw/.ipynb_checkpoints/",
    ):
        assert f"ignored {rel}" in notes, (rel, notes)
    only_ex02 = autograder.collect(up, tmp_path / "dest2", assignment={"ex02"})
    assert only_ex02["taken"] == {} and "no exercise notebook" in only_ex02["notes"][0]


LEAK_TEST = f"""
def _key_found():  # the key on a command line, in an environment, or the key file itself
    secret = {KEY.hex()[::-1]!r}[::-1].encode()  # written reversed: the notebook holds no key
    for pid in os.listdir("/proc"):
        for what in ("cmdline", "environ"):
            try:
                if pid.isdigit() and secret in open(f"/proc/{{pid}}/{{what}}", "rb").read():
                    return True
            except OSError:
                pass
    for path in ({{KEY_FILE!r}}, "/autograder/source/key"):
        try:
            if secret in open(path, "rb").read():
                return True
        except OSError:
            pass
    return False


def attend(query, keys, values):  # right only if the grading key could be read
    if not _key_found():
        return np.zeros((query.shape[0], values.shape[1]), dtype=query.dtype)
    weights = softmax(dot_scores(query, keys))
    return weights @ values, weights
"""


def _with_attend(source: str) -> str:
    """ex01's solution with the cell that defines ``attend`` replaced by ``source``."""
    nb = nbformat.reads(solution_text(EX01), as_version=4)
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex01_attend"]
    assert len(cells) == 1
    cells[0].source = source
    return nbformat.writes(nb)


def _attack(root: Path, package: Path) -> str:
    """ex01's solution plus a cell that tries to forge the score in the three ways the recipe
    must shut (write results.json, write into the installed course, outlive the run), and an
    ``attend`` that is right only if it can read the key (a command line, an environment, the
    key file)."""
    results = str(root / "results" / "results.json")
    later = (
        "import json, os, time\n"  # for two minutes, put the forged score back whenever it changes
        "for _ in range(480):\n"
        "    time.sleep(0.25)\n"
        "    try:\n"
        f"        if os.path.exists({results!r}) and json.load(open({results!r})).get('score') != 999:\n"
        f"            open({results!r}, 'w').write(json.dumps({{'score': 999.0}}))\n"
        "    except Exception:\n"
        "        pass\n"
    )
    cell = f"""
import os, subprocess, sys
for target in ({results!r}, {str(package)!r}):
    try:
        with open(target, "a") as f:
            f.write("# forged by the submission")
    except OSError:
        pass
try:
    subprocess.Popen([sys.executable, "-c", {later!r}], start_new_session=True)
except Exception:
    pass
"""
    nb = nbformat.reads(
        _with_attend(LEAK_TEST.replace("{KEY_FILE!r}", repr(str(root / "source" / "key")))),
        as_version=4,
    )
    nb.cells.insert(1, nbformat.v4.new_code_cell(cell))
    return nbformat.writes(nb)


MODES = [None] + (["user"] if os.geteuid() == 0 else [])  # "user": as in Gradescope's container


@pytest.mark.parametrize("isolation", MODES, ids=[m or "auto" for m in MODES])
def test_a_submission_cannot_forge_its_score(tmp_path, isolation):
    if isolation == "user":
        require_user_mode()
    import mha_course

    package = Path(mha_course.__file__)
    original = package.read_bytes()
    root = tmp_path / "autograder"
    try:
        res = run_autograder(tmp_path, {f"{EX01}.ipynb": _attack(root, package)}, isolation)
        time.sleep(3)  # a surviving writer would have put 999 back by now
        after = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
        changed = package.read_bytes() != original
    finally:
        if package.read_bytes() != original:
            package.write_bytes(original)
    honest = (
        POINTS[EX01] - by_name(res)["ex01_attend"]["max_score"]
    )  # attend is 0 unless the key leaked
    assert after["score"] == res["score"] == honest, res["tests"]
    assert not changed, "the submission wrote into the installed course"
    assert res["extra_data"]["isolation"] == (isolation or res["extra_data"]["isolation"])
    assert res["extra_data"]["isolation"] in {"bwrap", "user"}


def test_recipe_grades_with_isolation():
    """The recipe relies on the grader's sandbox: it never asks to grade without one (and the
    runs above check results.json says bwrap or user)."""
    for name in ("run_autograder", "autograder.py"):
        code = [
            ln for ln in (RECIPE / name).read_text().splitlines() if not ln.lstrip().startswith("#")
        ]
        assert not any(
            w in ln
            for ln in code
            for w in ("--no-isolation", "no_isolation", "isolation_mode", "MHA_GRADER_ISOLATION")
        ), name
    helper = (RECIPE / "autograder.py").read_text()
    assert re.search(r"grade_class\(\s*student\.parent", helper)
    assert (
        re.search(r"key=key,\s*submission=sid", helper) and "seed=" not in helper
    )  # secret inputs only
    setup = (RECIPE / "setup.sh").read_text()
    assert "bubblewrap" in setup and "go-w /opt/mha" in setup


# --- secret inputs: fresh for each submission, the same for the same one, none without a key ----


def _pinned_attend(submission: int) -> str:
    """An ``attend`` that is right only on the inputs of ``submission`` (it knows their first
    query entries, computed here from the key, and returns zeros on any other input)."""
    item = next(it for it in items_for(EX01) if it.id == "ex01_attend")
    known = [
        float(c["query"].flat[0])
        for c in item.cases(StudentInputs(KEY, "student", str(submission)))
    ]
    return f"""
def attend(query, keys, values):  # right only on one submission's inputs
    if not any(abs(float(query.flat[0]) - k) < 1e-6 for k in {known!r}):
        return np.zeros((query.shape[0], values.shape[1]), dtype=query.dtype)
    weights = softmax(dot_scores(query, keys))
    return weights @ values, weights
"""


def test_each_submission_gets_its_own_inputs(tmp_path):
    """Two resubmissions (two ids) of the same notebook are graded on different inputs; the
    same id again reproduces them. The notebook is right only on submission SUBMISSION's inputs."""
    upload = {f"{EX01}.ipynb": _with_attend(_pinned_attend(SUBMISSION))}
    first = run_autograder(tmp_path / "a", upload, submission=SUBMISSION)
    again = run_autograder(tmp_path / "b", upload, submission=SUBMISSION)
    other = run_autograder(tmp_path / "c", upload, submission=SUBMISSION + 1)
    assert by_name(first)["ex01_attend"]["status"] == "passed", first["tests"]
    assert first["score"] == POINTS[EX01]
    assert by_name(again)["ex01_attend"] == by_name(first)["ex01_attend"]
    assert by_name(other)["ex01_attend"]["status"] == "failed", other["tests"]
    assert other["score"] == POINTS[EX01] - by_name(other)["ex01_attend"]["max_score"]
    assert [r["extra_data"]["submission"] for r in (first, again, other)] == [
        str(SUBMISSION),
        str(SUBMISSION),
        str(SUBMISSION + 1),
    ]
    assert {r["extra_data"]["key_fingerprint"] for r in (first, again, other)} == {fingerprint(KEY)}


def _refused(tmp_path, **layout) -> dict:
    res = run_autograder(tmp_path, {f"{EX01}.ipynb": solution_text(EX01)}, returncode=2, **layout)
    assert res["score"] == 0 and res["tests"] == []
    assert "could not grade" in res["output"] and "refusing to grade" in res["_log"]
    assert "extra_data" not in res  # nothing was graded
    return res


def test_no_key_means_no_grade(tmp_path):
    """No source/key: refused, never graded on public inputs; an old zip with a seed is told why."""
    assert "source/key is missing" in _refused(tmp_path / "a", key=None)["output"]
    old = _refused(tmp_path / "b", key=None, source={"seed": "271828\n"})
    assert "source/key is missing (source/seed is no longer used)" in old["output"]


def test_unusable_key_or_no_submission_id_means_no_grade(tmp_path):
    assert "does not hold a hex key" in _refused(tmp_path / "a", key="my secret\n")["output"]
    assert "at least 16 bytes" in _refused(tmp_path / "c", key="271828\n")["output"]  # an old seed
    assert "no submission id" in _refused(tmp_path / "b", submission=None)["output"]

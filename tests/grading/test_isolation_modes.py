"""Class layout (issue #10, class 10), the gradebook's output safety, the dedicated-user fallback
and the refusal path (no isolation available)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from grading_helpers import SOLUTIONS, TEST_LIMITS, build, require_user_mode

from mha_course.grading import items_for
from mha_grader.sandbox import isolation

EX01 = "ex01_dot_product_attention.ipynb"
EX01_POINTS = sum(it.points for it in items_for("ex01"))


def _require_linux_sandbox() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the OS sandbox is Linux-only")
    problem = isolation.bwrap_problem()
    if problem:
        pytest.fail(f"the grading sandbox (bwrap) cannot start here: {problem}")


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """alice: a real submission; eve: a symlink to alice's folder; frank: a hard-linked notebook;
    a student folder named grades.csv; a student whose name is a spreadsheet formula."""
    _require_linux_sandbox()
    from mha_grader.classroom import grade_class

    tmp = tmp_path_factory.mktemp("layout")
    sub = tmp / "submissions"
    (sub / "alice").mkdir(parents=True)
    shutil.copy(SOLUTIONS / EX01, sub / "alice" / EX01)
    os.symlink(sub / "alice", sub / "eve")
    (sub / "frank").mkdir()
    shutil.copy(SOLUTIONS / EX01, tmp / "copy.ipynb")
    os.link(tmp / "copy.ipynb", sub / "frank" / EX01)
    for name in ("grades.csv", "=HYPERLINK(1)"):
        (sub / name).mkdir()
        shutil.copy(SOLUTIONS / EX01, sub / name / EX01)
    out = tmp / "out"
    rows = grade_class(sub, out, workers=2, seed=3, limits=TEST_LIMITS, progress=False)
    return out, rows, sub


def test_symlinked_student_folder_is_rejected(layout):
    out, rows, _ = layout
    assert rows["alice"] and sum(rows["alice"].values()) == EX01_POINTS
    assert sum(rows["eve"].values()) == 0
    meta = json.loads((out / "grading.json").read_text())
    assert "symbolic link" in " ".join(meta["rejected"]["eve"])


def test_hard_linked_notebook_is_rejected(layout):
    out, rows, _ = layout
    assert sum(rows["frank"].values()) == 0
    res = json.loads((out / "frank" / "results.json").read_text())
    ex01 = [t for t in res["tests"] if t["name"].startswith("ex01")]
    assert ex01 and all(
        t["output"].startswith("rejected") and "hard link" in t["output"] for t in ex01
    )


def test_reserved_student_name_neither_crashes_nor_clobbers(layout):
    out, rows, _ = layout
    assert sum(rows["grades.csv"].values()) == 0
    assert (out / "grades.csv").is_file()
    with open(out / "grades.csv", newline="") as f:
        students = [r["student"] for r in csv.DictReader(f)]
    assert "grades.csv" in students and "reserved" in " ".join(
        json.loads((out / "grading.json").read_text())["rejected"]["grades.csv"]
    )


def test_formula_names_are_escaped_in_the_csv(layout):
    out, rows, _ = layout
    assert sum(rows["=HYPERLINK(1)"].values()) == EX01_POINTS
    with open(out / "grades.csv", newline="") as f:
        students = [r["student"] for r in csv.DictReader(f)]
    assert "'=HYPERLINK(1)" in students and "=HYPERLINK(1)" not in students


def test_output_folder_must_be_fresh(layout, tmp_path):
    from mha_grader.classroom import grade_class

    _, _, sub = layout
    out = tmp_path / "out"
    (out / "alice").mkdir(parents=True)
    os.symlink(tmp_path / "victim", out / "alice" / "feedback.md")
    with pytest.raises(ValueError, match="not empty"):
        grade_class(sub, out, workers=1, seed=3, limits=TEST_LIMITS, progress=False)
    assert not (tmp_path / "victim").exists()


def test_writes_never_follow_links(tmp_path):
    from mha_grader.outputs import write_new

    os.symlink(tmp_path / "victim", tmp_path / "f")
    with pytest.raises(FileExistsError):
        write_new(tmp_path / "f", "x")
    assert not (tmp_path / "victim").exists()


# ---------------------------------------------------------------- the dedicated-user fallback

FALLBACK = {  # attack -> what the fallback must stop
    "read_parent_environ_cwd": "error",
    "overwrite_peer_notebook": "error",
    "append_to_installed_package": "error",
    "reload_forbidden_module": "forbidden API",
}


def test_dedicated_user_fallback(tmp_path, monkeypatch):
    """The same attacks under ``MHA_GRADER_ISOLATION=user`` (the grader must be root)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the dedicated-user fallback is used only by a root grader on Linux")
    require_user_mode()
    import test_isolation as T
    from grading_helpers import grade_many

    peer = build("ex02", tmp_path / "peer" / "ex02_scaled_dot_product_attention.ipynb")
    before = peer.read_bytes()
    jobs = {}
    for name in FALLBACK:
        kw = json.loads(json.dumps(T.ATTACKS[name][1]))
        kw["replace"] = {
            k: v.replace("{PEER!r}", repr(str(peer))) for k, v in kw.get("replace", {}).items()
        }
        kw["extra"] = [(p, s.replace("{PEER!r}", repr(str(peer)))) for p, s in kw.get("extra", [])]
        jobs[name] = (build("ex02", tmp_path / name / "sub.ipynb", **kw), "ex02")
    outlive = T.OUTLIVE.replace("{TOKEN_NUM}", "424242").replace("{MARKER}", str(tmp_path / "late"))
    jobs["outlive"] = (
        build("ex02", tmp_path / "outlive" / "sub.ipynb", extra=[(2, outlive)]),
        "ex02",
    )
    monkeypatch.setenv(isolation.ENV_VAR, "user")
    monkeypatch.setenv("MHA_TEST_CANARY", "1")
    results = grade_many(jobs)
    for name, status in FALLBACK.items():
        res, notes = results[name]
        r = res[T.CAUSAL]
        assert (r.points, r.status) == (0.0, status), f"{name}: {r.status}: {r.message} {notes}"
    assert all(r.passed for r in results["outlive"][0].values())
    assert peer.read_bytes() == before
    import time

    time.sleep(7.0)
    assert not (tmp_path / "late").exists(), "a process of the grading user outlived its submission"
    alive = [p.name for p in Path("/proc").glob("[0-9]*") if b"6.424242" in _cmdline(p)]
    assert not alive, f"processes started by a submission outlived grading: {alive}"


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


# ---------------------------------------------------------------- refusal, and --no-isolation


def _args(sub: Path, out: Path, no_isolation: bool) -> argparse.Namespace:
    from mha_course.commands import grade

    p = argparse.ArgumentParser()
    grade.add_arguments(p)
    return p.parse_args(
        [
            str(sub),
            "--out",
            str(out),
            "--seed",
            "5",
            "--no-progress",
            "--workers",
            "1",
            *(["--no-isolation"] if no_isolation else []),
        ]
    )


def test_grade_refuses_without_isolation_and_stamps_no_isolation(tmp_path, monkeypatch, capsys):
    from mha_course.commands import grade

    monkeypatch.delenv(isolation.ENV_VAR, raising=False)
    monkeypatch.setattr(isolation, "bwrap_problem", lambda: "bubblewrap (`bwrap`) is not installed")
    monkeypatch.setattr(isolation, "user_problem", lambda: "the grader is not root")
    sub = tmp_path / "sub"
    (sub / "alice").mkdir(parents=True)
    shutil.copy(SOLUTIONS / EX01, sub / "alice" / EX01)
    assert grade.run(_args(sub, tmp_path / "out", False)) == 2
    said = capsys.readouterr().err
    assert "refusing" in said and "apt-get install bubblewrap" in said and "--no-isolation" in said
    assert not (tmp_path / "out" / "grades.csv").exists()
    assert grade.run(_args(sub, tmp_path / "out2", True)) == 0
    assert "NOT ISOLATED" in capsys.readouterr().out
    with open(tmp_path / "out2" / "grades.csv", newline="") as f:
        header, row = list(csv.reader(f))[:2]
    assert header[-1] == "not isolated" and row[-1] == "not isolated" and row[0] == "alice"
    assert float(row[1]) == EX01_POINTS
    assert "not isolated" in (tmp_path / "out2" / "alice" / "feedback.md").read_text()
    assert json.loads((tmp_path / "out2" / "alice" / "results.json").read_text())[
        "output"
    ].startswith("not isolated")
    assert (
        "NOT ISOLATED" in json.loads((tmp_path / "out2" / "grading.json").read_text())["isolation"]
    )


def test_forced_user_mode_the_grading_user_cannot_run_refuses(tmp_path, monkeypatch, capsys):
    """``MHA_GRADER_ISOLATION=user`` where the dedicated uid cannot read the runtime (a venv in
    a 0700 folder): the grader refuses (exit 2, saying why), and writes no gradebook. (Before the
    fix: exit 0 and a grades.csv of zeros, every child failing to start.)"""
    from mha_course.commands import grade

    monkeypatch.setenv(isolation.ENV_VAR, "user")
    monkeypatch.setattr(isolation, "user_problem", lambda: None)  # as if root on Linux
    monkeypatch.setattr(isolation, "_traversable", lambda path: False)  # as if in a 0700 folder
    sub = tmp_path / "sub"
    (sub / "alice").mkdir(parents=True)
    shutil.copy(SOLUTIONS / EX01, sub / "alice" / EX01)
    assert grade.run(_args(sub, tmp_path / "out", False)) == 2
    said = capsys.readouterr().err
    assert "refusing" in said and "MHA_GRADER_ISOLATION=user" in said, said
    assert "the dedicated grading user cannot read" in said, said
    assert not (tmp_path / "out" / "grades.csv").exists()

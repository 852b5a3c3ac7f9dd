"""Grading inputs come from a secret run key and the student's id (attack class 11: one leak must
not serve a class): no two students share inputs, the same key + student reproduces them, the key
file is private, and the key never reaches a sandbox."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from grading_helpers import TEST_LIMITS, build

from mha_course.grading import all_items, items_for
from mha_grader import runner
from mha_grader.keys import (
    KeyFileError,
    PublicSeed,
    StudentInputs,
    default_key_path,
    fingerprint,
    load_or_create,
    new_key_file,
    read_key_file,
)

ITEMS = all_items()
KEY = bytes(range(32))


def _plain(cases) -> str:
    return repr(
        [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in c.items()} for c in cases]
    )


@pytest.mark.parametrize("item", ITEMS, ids=[it.id for it in ITEMS])
def test_no_two_students_share_inputs_and_a_key_reproduces(item):
    alice, bob = StudentInputs(KEY, "alice"), StudentInputs(KEY, "bob")
    assert _plain(item.cases(alice)) == _plain(item.cases(StudentInputs(KEY, "alice")))
    assert _plain(item.cases(alice)) != _plain(item.cases(bob)), (
        f"{item.id}: alice and bob share inputs"
    )
    class_of_30 = {_plain(item.cases(StudentInputs(KEY, f"student{i}"))) for i in range(30)}
    assert len(class_of_30) == 30, f"{item.id}: two of 30 students share inputs"
    assert _plain(item.cases(alice)) != _plain(item.cases(StudentInputs(bytes(32), "alice"))), (
        f"{item.id}: inputs do not depend on the key"
    )
    resubmitted = StudentInputs(KEY, "alice", submission="2")
    assert _plain(item.cases(alice)) != _plain(item.cases(resubmitted)), (
        f"{item.id}: a resubmission gets the same inputs"
    )
    assert _plain(item.cases(alice)) != _plain(item.cases(12345)), (
        f"{item.id}: grading inputs equal the public self-check inputs"
    )


def test_public_seed_is_what_an_int_seed_always_meant():
    item = ITEMS[0]
    assert _plain(item.cases(7)) == _plain(item.cases(PublicSeed(7)))
    assert "different, secret inputs" in PublicSeed(12345).describe()


def test_digests_differ_per_student_item_and_submission():
    seen = {
        StudentInputs(KEY, s, sub).digest(i)
        for s in ("a", "b", "a\0b")
        for i in ("x", "y", "b\0x")
        for sub in ("", "1")
    }
    assert len(seen) == 18


def test_key_file_is_private_reused_and_checked(tmp_path):
    path = tmp_path / "graded.key"
    key, created = load_or_create(path)
    assert created and len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create(path) == (key, False)  # reused: regrading is identical
    with pytest.raises(FileExistsError):
        new_key_file(path)  # never overwritten
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        read_key_file(path)
    os.chmod(path, 0o600)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(KeyFileError, match="cannot open"):
        read_key_file(link)
    assert default_key_path(tmp_path / "graded") == tmp_path / "graded.key"
    assert key.hex() not in fingerprint(key) and len(fingerprint(key)) == 16


def test_the_key_never_reaches_the_sandbox(tmp_path, monkeypatch):
    """What the parent hands the child (job spec, input arrays, the sandbox's command line and
    environment) holds none of the key, its hex, or the per-item digests."""
    from mha_grader import job
    from mha_grader.sandbox import launch as sandbox

    seen, launched = [], []
    from mha_grader.sandbox.watch import Held

    seen_next = []
    real_run, real_popen, real_resume = job.run_child_held, sandbox.subprocess.Popen, Held.resume

    def spy(root, spec, arrays, *a, **k):
        seen.append(
            (json.dumps(spec), b"".join(np.ascontiguousarray(v).tobytes() for v in arrays.values()))
        )
        return real_run(root, spec, arrays, *a, **k)

    def popen(cmd, *a, env=None, **k):
        launched.append(json.dumps([list(map(str, cmd)), env or {}]))
        return real_popen(cmd, *a, env=env, **k)

    def resume(self, spec):  # a held child's next job (a retry), sent through a pipe
        seen_next.append((json.dumps(spec), b""))
        return real_resume(self, spec)

    monkeypatch.setattr(job, "run_child_held", spy)  # where step 2 (job._run) looks it up
    monkeypatch.setattr(Held, "resume", resume)
    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    inputs = StudentInputs(KEY, "alice")
    nb = build("ex01", tmp_path / "alice" / "ex01.ipynb")
    items = items_for("ex01")
    results, _ = runner.grade_notebook(nb, items, inputs, TEST_LIMITS)
    assert all(r.passed for r in results), [r.message for r in results]
    secrets_ = [KEY, KEY.hex().encode()] + [inputs.digest(it.id) for it in items]
    secrets_ += [d.hex().encode() for d in secrets_[2:]]
    assert seen and launched
    for text, blob in seen + seen_next:
        for s in secrets_:
            assert s not in text.encode() and s not in blob
    for text in launched:
        assert not any(s.hex() in text or s.decode(errors="ignore") in text for s in secrets_[:2])

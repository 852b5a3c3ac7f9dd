"""Issue 33: a student's retries (``substitute.py``) run in the child that ran their first job,
held at its end (``mha_grader/sandbox/watch.py``), not in a second sandbox that imports torch
again - with the same verdicts, nothing of the first job visible to them, and nothing left behind.
"""

from __future__ import annotations

import pytest
from grading_helpers import TEST_LIMITS, build

from mha_course.grading import items_for
from mha_grader import runner
from mha_grader.sandbox import confine, isolation
from mha_grader.sandbox import launch as sandbox
from mha_grader.sandbox.watch import Held

pytestmark = pytest.mark.skipif(
    isolation.bwrap_problem() is not None or confine.problem() is not None,
    reason="a child is held only in bubblewrap with Landlock-confined units",
)

NO_SCALE = """
def scaled_scores(query, key):
    return query @ key.transpose(-2, -1)
"""
# ex02's task 4, right, over the learner's wrong task 1: retried with the course's scaled_scores.
# It answers right only if exactly one results folder ("u<k>") is visible by name from where it
# runs: in its retry that is its own, the first job's being sealed again.
PEEKING = """
def _visible():
    import os
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/progress"):
            out = os.path.dirname(target)
            return [n for n in (f"u{k}" for k in range(40)) if os.path.exists(os.path.join(out, n))]
    raise RuntimeError("no results folder found")


def attention(query, key, value, attn_mask=None):
    scores = scaled_scores(query, key)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    if len(_visible()) != 1:
        weights = weights * 2
    return weights @ value, weights
"""


def _grade(path, monkeypatch, units=None):
    """(results by id, sandboxes started, held children resumed) of grading ex02 at ``path``."""
    if units:
        monkeypatch.setenv(confine.ENV_VAR, units)
    started, resumed = [], []
    real_popen, real_resume = sandbox.subprocess.Popen, Held.resume

    def popen(cmd, *a, **k):
        if any("mha_grader.sandbox.child" in str(x) for x in cmd):  # a child, not the scanner
            started.append(cmd)
        return real_popen(cmd, *a, **k)

    def resume(self, spec):
        resumed.append(spec)
        return real_resume(self, spec)

    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    monkeypatch.setattr(Held, "resume", resume)
    results, _ = runner.grade_notebook(path, items_for("ex02"), 7, TEST_LIMITS, "bwrap")
    monkeypatch.undo()
    return {r.id: r for r in results}, len(started), len(resumed)


def test_retries_run_in_the_held_child_with_a_fresh_sandboxs_verdicts(tmp_path, monkeypatch):
    path = build("ex02", tmp_path / "ex02.ipynb", replace={"ex02_scaled_scores": NO_SCALE})
    held, started, resumed = _grade(path, monkeypatch)
    assert (started, resumed) == (1, 1)  # one sandbox: its zygote ran the retry too
    assert not held["ex02_scaled_scores"].passed and held["ex02_attention"].passed
    fresh, started, resumed = _grade(path, monkeypatch, units="sandbox")
    assert resumed == 0 and started > 1  # one sandbox per unit: nothing is held
    assert {k: (r.status, r.points, r.message) for k, r in held.items()} == {
        k: (r.status, r.points, r.message) for k, r in fresh.items()
    }


def test_a_retry_sees_no_results_folder_of_the_first_job(tmp_path, monkeypatch):
    path = build(
        "ex02",
        tmp_path / "ex02.ipynb",
        replace={"ex02_scaled_scores": NO_SCALE, "ex02_attention": PEEKING},
    )
    got, started, resumed = _grade(path, monkeypatch)
    assert (started, resumed) == (1, 1)
    assert got["ex02_attention"].passed, got["ex02_attention"].message


def test_no_retry_no_next_job_and_nothing_left(tmp_path, monkeypatch):
    """A right submission: the child is held at its end, told there is nothing more, and gone;
    its run's folders are removed with the student's."""
    path = build("ex02", tmp_path / "ex02.ipynb")
    got, started, resumed = _grade(path, monkeypatch)
    assert all(r.passed for r in got.values()) and (started, resumed) == (1, 0)
    assert not sandbox._LIVE or all(not _alive(p) for p in sandbox._LIVE)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_a_held_child_that_died_leaves_its_retry_to_a_fresh_one(tmp_path, monkeypatch):
    from mha_grader.sandbox.reap import _kill

    path = build("ex02", tmp_path / "ex02.ipynb", replace={"ex02_scaled_scores": NO_SCALE})
    real_resume = Held.resume

    def killed_first(self, spec):  # the whole sandbox gone before its next job is sent
        _kill(self.watch.proc, self.watch.inner, "bwrap")
        return real_resume(self, spec)

    monkeypatch.setattr(Held, "resume", killed_first)
    results, _ = runner.grade_notebook(path, items_for("ex02"), 7, TEST_LIMITS, "bwrap")
    got = {r.id: r for r in results}
    assert not got["ex02_scaled_scores"].passed
    assert got["ex02_attention"].passed, got["ex02_attention"].message


def test_a_done_on_the_progress_stream_alone_holds_nothing(tmp_path):
    """The parent holds a child only when its zygote says it waits, on a pipe no unit holds: a
    "done" that learner code wrote to the progress stream (every unit inherits it) is not that.
    Here a child writes "setup" and "done" there and lives on; it is watched until it exits."""
    import os
    import subprocess
    import sys
    import time

    from mha_grader.sandbox import protocol
    from mha_grader.sandbox.launch import Limits
    from mha_grader.sandbox.stage_clock import _StageClock, _Stream
    from mha_grader.sandbox.watch import _Watch

    prog_r, prog_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    ready_r, ready_w = os.pipe()  # the "waiting" pipe: this child never writes it
    lines = "".join(s.ljust(protocol.MAX_STAGE) + "\n" for s in (protocol.SETUP, protocol.DONE))
    code = f"import os, time; os.write({prog_w}, {lines!r}.encode()); time.sleep(1.5)"
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[prog_w])
    os.close(prog_w)
    plan = [protocol.SETUP, protocol.DONE]
    watch = _Watch(
        proc,
        None,
        "none",
        None,
        _Stream(prog_r, 4096),
        _StageClock(plan),
        tmp_path,
        tmp_path,
        False,
        Limits(),
        time.monotonic() + 60,
        ctl=ctl_w,
        ready=ready_r,
    )
    start = time.monotonic()
    killed, paused = watch.run(hold=True)
    assert not paused and killed is None and time.monotonic() - start > 1.0
    assert watch.clock.stage == protocol.DONE
    for fd in (prog_r, ctl_r, ready_w):
        os.close(fd)

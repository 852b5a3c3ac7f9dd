"""Availability (issue #19): nothing a submission does costs the grader more than a fixed budget.

Each attack is aimed at the GRADER (its clock, its memory, the host's disk and shared memory),
not at marks: the hostile student gets a clear status, every other item is graded as usual, and
the grading process survives within the bounds stated in docs/instructor_guide.md ("Security").
"""

from __future__ import annotations

import sys
import time

import pytest
from grading_helpers import TEST_LIMITS, build, grade_many

from mha_grader import isolation

EX02 = "ex02_scaled_dot_product_attention"
CAUSAL, ATT = "ex02_causal_mask", "ex02_attention"


def _require_sandbox() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the OS sandbox is Linux-only")
    problem = isolation.bwrap_problem()
    if problem:
        pytest.fail(f"the grading sandbox (bwrap) cannot start here: {problem}")


def _limits(**kw):
    from mha_grader.sandbox import Limits
    return Limits(**{**TEST_LIMITS.__dict__, **kw})


# A cell that finds the progress file it inherited and keeps rewriting it (going back to
# "setup", which has a start-up allowance, and to a stage that is not in the plan).
STRETCH = r'''
import os, time
_fd = next(int(f) for f in os.listdir("/proc/self/fd")
           if os.readlink(f"/proc/self/fd/{f}").endswith("/progress"))
for _i in range(10_000):
    os.pwrite(_fd, (("setup" if _i % 2 else "cell x 1").ljust(100) + "\n").encode(), 0)
    time.sleep(0.5)
'''


def test_a_cell_cannot_stretch_its_wall_limit_by_writing_progress(tmp_path):
    """Item limit 3 s, student deadline 90 s: the cell that rewrites its progress is stopped by
    the parent's clock at once (the stages went back), not at the student's deadline; its
    items get "invalid result" saying why. (Before the fix: held until the deadline.)"""
    _require_sandbox()
    nb = build("ex02", tmp_path / "stretch" / f"{EX02}.ipynb", extra=[(2, STRETCH)])
    start = time.monotonic()
    res, notes = grade_many({"s": (nb, "ex02")},
                            limits=_limits(item_timeout=3.0, student_timeout=90.0,
                                           notebook_timeout=90.0))["s"]
    took = time.monotonic() - start
    assert took < 50.0, f"the cell held the grader for {took:.0f} s (its limit is 3 s)"
    assert all(r.status == "invalid result" and "progress" in r.message for r in res.values()), res


def _modes() -> list[str]:
    return ["bwrap", "user"] if sys.platform.startswith("linux") else []


def _need(mode: str) -> None:
    from mha_grader import space
    if mode == "user" and isolation.user_problem():
        pytest.skip(f"mode user: {isolation.user_problem()}")
    if mode == "bwrap":
        _require_sandbox()
    if not space.can_mount():
        pytest.skip("the grader is not root: only /tmp and /dev/shm are sized (bubblewrap --size)")


# Fill the writable space: bytes (8 MiB files, under the per-file limit) or files (empty ones).
FILL = r'''
import errno, os
_wrote, _files, _err = 0, 0, None
try:
    for _d in (os.environ["HOME"], "/dev/shm"):
        try:
            os.listdir(_d)
        except OSError:
            continue
        while _wrote < (400 << 20) and _files < 50_000:
            with open(os.path.join(_d, f"f{_files}"), "wb") as _f:
                _f.write(b"x" * (8 << 20) if KIND == "bytes" else b"")
            _wrote += (8 << 20) if KIND == "bytes" else 0
            _files += 1
except OSError as _e:
    _err = _e.errno
'''


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_filling_the_writable_space_is_a_clear_status(tmp_path, mode, kind):
    """The child's writable space is 32 MiB / 600 files: a cell that writes 400 MiB (or 50 000
    files) hits ENOSPC there, the student gets a note saying so, every item is still graded,
    and nothing stays behind. (Before the fix: 400 MiB of host disk, 50 000 host inodes.)"""
    from grading_helpers import build
    _need(mode)
    check = ("if _err == errno.ENOSPC and _wrote <= (32 << 20) and _files <= 600:\n"
             "        return torch.tril(torch.ones(L, S, dtype=torch.bool))\n"
             "    raise RuntimeError(f'not stopped: {_err} {_wrote} {_files}')")
    nb = build("ex02", tmp_path / "fill" / f"{EX02}.ipynb",
               replace={CAUSAL: f"def make_causal_mask(L, S):\n    {check}\n"},
               extra=[(2, f"KIND = {kind!r}\n" + FILL)])
    from mha_course.grading import items_for
    from mha_grader.runner import grade_submission
    results, notes = grade_submission({"nb": nb}, {"nb": items_for("ex02")}, 7,
                                      _limits(disk_mb=32, disk_files=600), mode)["nb"]
    by_id = {r.id: r for r in results}
    assert by_id[CAUSAL].passed, (by_id[CAUSAL], notes)
    assert any("filled its writable space (temp: 32 MiB, 600 files" in n for n in notes), notes
    assert all(r.passed for r in results), results

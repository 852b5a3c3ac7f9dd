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

from mha_grader.sandbox import isolation

EX02 = "ex02_scaled_dot_product_attention"
CAUSAL, ATT = "ex02_causal_mask", "ex02_attention"


def _require_sandbox() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the OS sandbox is Linux-only")
    problem = isolation.bwrap_problem()
    if problem:
        pytest.fail(f"the grading sandbox (bwrap) cannot start here: {problem}")


def _limits(**kw):
    from mha_grader.sandbox.launch import Limits

    return Limits(**{**TEST_LIMITS.__dict__, **kw})


# A cell that finds the progress it inherited (the file, and the harness's progress stream, from
# the harness's frames) and keeps rewriting it (going back to "setup", which has a start-up
# allowance, and to a stage that is not in the plan).
STRETCH = r"""
import os, sys, time
_fd = next(int(f) for f in os.listdir("/proc/self/fd")
           if os.readlink(f"/proc/self/fd/{f}").endswith("/progress"))
_f = sys._getframe()
while _f is not None and "job" not in _f.f_locals:
    _f = _f.f_back
_stream = _f.f_locals["job"].get("progress_fd")
for _i in range(10_000):
    _line = (("setup" if _i % 2 else "cell x 1").ljust(100) + "\n").encode()
    os.pwrite(_fd, _line, 0)
    if _stream is not None:
        os.write(_stream, _line)
    time.sleep(0.5)
"""


def test_a_cell_cannot_stretch_its_wall_limit_by_writing_progress(tmp_path):
    """Item limit 3 s, student deadline 90 s: the cell that rewrites its progress is stopped by
    the parent's clock at once (the stages went back), not at the student's deadline; its
    items get "invalid result" saying why. (Before the fix: held until the deadline.)"""
    _require_sandbox()
    nb = build("ex02", tmp_path / "stretch" / f"{EX02}.ipynb", extra=[(2, STRETCH)])
    start = time.monotonic()
    res, notes = grade_many(
        {"s": (nb, "ex02")},
        limits=_limits(item_timeout=3.0, student_timeout=90.0, notebook_timeout=90.0),
    )["s"]
    took = time.monotonic() - start
    assert took < 50.0, f"the cell held the grader for {took:.0f} s (its limit is 3 s)"
    assert all(r.status == "invalid result" and "progress" in r.message for r in res.values()), res


# A slow cell (8 s; the item limit is 3 s) that, while it sleeps, names the stages AFTER its own
# in the progress it inherited (the file, and the harness's progress stream), one every 2 s, so
# each later stage starts its allowance early; then it defines the graded function. Three quick
# cells follow it: the harness names their stages again within microseconds. It reads the plan
# as the parent does (the job and the protocol, from the harness's frames).
AHEAD = r"""
import os, sys, time
from mha_grader.sandbox import protocol as _p
_f = sys._getframe()
while _f is not None and not {"nb", "job", "cell"} <= set(_f.f_locals):
    _f = _f.f_back
_job, _nb, _cell = _f.f_locals["job"], _f.f_locals["nb"], _f.f_locals["cell"]
_plan = _p.stage_plan(_job)
_at = _plan.index(_p.cell_stage(_nb["name"], _cell["index"]))
_file = next(int(f) for f in os.listdir("/proc/self/fd")
             if os.readlink(f"/proc/self/fd/{f}").endswith("/progress"))
for _stage in _plan[_at + 1:_at + 4]:
    time.sleep(2.0)
    _line = (_stage.ljust(100) + "\n").encode()
    os.pwrite(_file, _line, 0)
    if _job.get("progress_fd") is not None:
        os.write(_job["progress_fd"], _line)
time.sleep(2.0)
"""
SLOW = "import time\ntime.sleep(8.0)\n"
GOOD_MASK = (
    "def make_causal_mask(L, S):\n    return torch.tril(torch.ones(L, S, dtype=torch.bool))\n"
)
BROKEN_MASK = "def make_causal_mask(L, S):\n    raise NotImplementedError\n"


def test_a_slow_cell_cannot_buy_time_by_naming_later_stages(tmp_path):
    """Item limit 3 s: an honest cell that needs 8 s is stopped and skipped, so the item its
    function serves is lost; the same cell that names later stages while it sleeps (so each
    starts its allowance early) must not earn it: the harness names those stages again when they
    really start, the parent reads every line (a stream, not a file it polls), and the
    submission's items get "invalid result" saying its progress was tampered with. (Before the
    fix: the parent polled a file the harness rewrites, missed the repeats, and the slow cell's
    item passed.)"""
    _require_sandbox()
    jobs = {}
    for name, cell in (("honest", SLOW), ("ahead", AHEAD)):
        jobs[name] = (
            build(
                "ex02",
                tmp_path / name / f"{EX02}.ipynb",
                replace={CAUSAL: BROKEN_MASK},
                extra=[(-1, cell + GOOD_MASK), *((-1, f"_x = {k}") for k in range(3))],
            ),
            "ex02",
        )
    got = grade_many(
        jobs, limits=_limits(item_timeout=3.0, student_timeout=90.0, notebook_timeout=90.0)
    )
    honest, ahead = got["honest"][0][CAUSAL], got["ahead"][0][CAUSAL]
    assert not honest.passed and any("timeout" in n for n in got["honest"][1]), (
        honest,
        got["honest"][1],
    )
    assert not ahead.passed, f"the cell bought time by naming later stages: {ahead}"
    assert ahead.status == "invalid result" and "progress" in ahead.message, ahead


def _modes() -> list[str]:
    return ["bwrap", "user"] if sys.platform.startswith("linux") else []


def _need(mode: str) -> None:
    from mha_grader.sandbox import space

    if mode == "user":
        from grading_helpers import require_user_mode

        require_user_mode()  # root, and the dedicated uid can read the runtime (not a 0700 clone)
    if mode == "bwrap":
        _require_sandbox()
    if not space.can_mount():
        pytest.skip("the grader is not root: only /tmp and /dev/shm are sized (bubblewrap --size)")


# Fill the writable space: bytes (8 MiB files, under the per-file limit) or files (empty ones).
FILL = r"""
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
"""


@pytest.mark.parametrize("polled", [True, False], ids=["polled", "between-polls"])
@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_filling_the_writable_space_is_a_clear_status(tmp_path, monkeypatch, mode, kind, polled):
    """The child's writable space is 32 MiB / 600 files: a cell that writes 400 MiB (or 50 000
    files) hits ENOSPC there, the student gets a note saying so, every item is still graded,
    and nothing stays behind. (Before the fix: 400 MiB of host disk, 50 000 host inodes.)

    ``between-polls``: the parent's polling never sees the space full (as when a unit fills it
    and the zygote frees it between two polls: this test failed in CI that way, 1 run in ~3);
    the zygote's look before it clears the unit's files still reports it."""
    from grading_helpers import build

    _need(mode)
    if not polled:
        from mha_grader.sandbox import launch as sandbox

        monkeypatch.setattr(sandbox.space, "full", lambda root: False)
    check = (
        "if _err == errno.ENOSPC and _wrote <= (32 << 20) and _files <= 600:\n"
        "        return torch.tril(torch.ones(L, S, dtype=torch.bool))\n"
        "    raise RuntimeError(f'not stopped: {_err} {_wrote} {_files}')"
    )
    nb = build(
        "ex02",
        tmp_path / "fill" / f"{EX02}.ipynb",
        replace={CAUSAL: f"def make_causal_mask(L, S):\n    {check}\n"},
        extra=[(2, f"KIND = {kind!r}\n" + FILL)],
    )
    from mha_course.grading import items_for
    from mha_grader.runner import grade_submission

    results, notes = grade_submission(
        {"nb": nb}, {"nb": items_for("ex02")}, 7, _limits(disk_mb=32, disk_files=600), mode
    )["nb"]
    by_id = {r.id: r for r in results}
    assert by_id[CAUSAL].passed, (by_id[CAUSAL], notes)
    assert any("filled its writable space (temp: 32 MiB, 600 files" in n for n in notes), notes
    assert all(r.passed for r in results), results


# ---------------------------------------------------------------- the parent's memory (item 2, 5)

# Run in a FRESH grader process (so its peak memory is its own): grade a class folder, print what
# came out and the grader's peak RSS (ru_maxrss, KiB on Linux) and its RSS before grading.
PROBE = r"""
import json, os, resource, sys, time
from pathlib import Path
from mha_grader.classroom import grade_class
from mha_grader.sandbox.launch import Limits
import mha_course.grading  # the items (torch): what the grader holds before any student
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
rows = grade_class(Path(sys.argv[1]), Path(sys.argv[2]), workers=2, seed=7, progress=False,
                   limits=Limits(item_timeout=15.0, notebook_timeout=150.0))
res = {s: json.loads((Path(sys.argv[2]) / s / "results.json").read_text()) for s in rows}
ex = tuple((sys.argv[3] if len(sys.argv) > 3 else "ex01").split(","))
print("PROBE", json.dumps({"pid": os.getpid(), "before_kib": before, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      "seconds": time.monotonic() - start,
      "status": {s: {t["name"]: t["output"].split(":")[0] for t in r["tests"] if t["name"].startswith(ex)}
                 for s, r in res.items()},
      "score": {s: {t["name"]: t["score"] for t in r["tests"] if t["name"].startswith(ex)}
                for s, r in res.items()},
      "feedback": {s: (Path(sys.argv[2]) / s / "feedback.md").read_text() for s in rows},
      "meta": json.loads((Path(sys.argv[2]) / "grading.json").read_text())}))
"""

# Every ex01 function of the hostile student returns as much as a result may be: three arrays
# of 56 MiB per case (under the 64 MiB file limit; up to 504 MiB per item, under the per-item
# cap of 512 MiB; 1.7 GiB for the four items).
FLOOD = "\n".join(
    f"def {f}(*a, **k):\n    import numpy as np\n"
    "    return tuple(np.ones(7_000_000) for _ in range(3))\n"
    for f in ("softmax", "dot_scores", "attend", "attention_weights")
)


def _class(tmp_path, *hostile: str):
    """Three students: two hand in ex01's solution, "mallory" ex01 with the ``hostile`` cells
    appended."""
    from grading_helpers import build

    sub = tmp_path / "class"
    for s in ("alice", "bob"):
        build("ex01", sub / s / "ex01_dot_product_attention.ipynb")
    build(
        "ex01",
        sub / "mallory" / "ex01_dot_product_attention.ipynb",
        extra=[(-1, h) for h in hostile],
    )
    return sub


def _probe(sub, out, cgroup=None, ex: str = "ex01") -> dict:
    import json
    import os
    import subprocess

    from grading_helpers import ROOT

    def enter() -> None:
        if cgroup is not None:
            cgroup.enter()

    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(sub), str(out), ex],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=enter,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, f"the grader died (exit {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.split("PROBE", 1)[1])


def _normal_graded(got: dict) -> None:
    for s in ("alice", "bob"):
        assert all(v == "passed" for v in got["status"][s].values()), got["status"]


def test_a_results_flood_costs_the_grader_a_fixed_budget(tmp_path):
    """mallory's four items return up to 504 MiB each (1.7 GiB in all): the grader's peak memory grows
    by less than 300 MiB over what it holds before grading, her items fail with a clear status,
    alice and bob are graded as usual. (Before: the parent held every item's arrays to the end.)"""
    _require_sandbox()
    got = _probe(_class(tmp_path, FLOOD), tmp_path / "out")
    _normal_graded(got)
    assert not any(v == "passed" for v in got["status"]["mallory"].values()), got["status"]
    grew = (got["peak_kib"] - got["before_kib"]) / 1024
    assert grew < 300, f"the grader's peak memory grew by {grew:.0f} MiB for one flooding student"
    print(
        f"results flood: grader {got['before_kib'] / 1024:.0f} -> {got['peak_kib'] / 1024:.0f} MiB"
    )


def test_the_budget_is_checked_before_any_array_is_read(tmp_path):
    """protocol.read_result refuses a result whose arrays declare more than the bytes left."""
    import numpy as np

    from mha_grader.sandbox import protocol

    arrays = [[np.zeros(1000)], [np.zeros(1000)]]
    protocol.write_result(str(tmp_path), "ex01_softmax", {"status": "ok"}, arrays)
    assert len(protocol.read_result(tmp_path, "ex01_softmax", budget=16_000)["outputs"]) == 2
    with pytest.raises(protocol.Invalid, match="budget"):
        protocol.read_result(tmp_path, "ex01_softmax", budget=15_999)


def test_a_notebook_that_is_costly_to_parse_costs_the_grader_nothing(tmp_path):
    """mallory's cell is a flat list of 1.5 million names (3 MiB, under the 20 MiB notebook cap):
    parsing it costs ``ast.parse`` 2.1 GB and 92 s (measured on the 2-core test machine). The
    grader reads notebooks in a limited process (``scan.py``: 1 GiB, the item's wall limit), so
    her notebook is "invalid notebook", the grader's memory grows by under 300 MiB and alice and
    bob are graded as usual. (Before: the grading process parsed it itself.)"""
    _require_sandbox()
    got = _probe(_class(tmp_path, "x = [" + "a," * 1_500_000 + "]"), tmp_path / "out")
    _normal_graded(got)
    assert set(got["status"]["mallory"].values()) == {"invalid notebook"}, got["status"]
    grew = (got["peak_kib"] - got["before_kib"]) / 1024
    assert grew < 300, f"the grader's peak memory grew by {grew:.0f} MiB reading one notebook"
    assert got["seconds"] < 120, got["seconds"]


def test_deeply_nested_notebook_json_is_refused_by_the_scanner(tmp_path):
    """JSON nested 200 000 deep (and a cell nested 100 000 deep) is refused with a clear status."""
    from mha_grader.sandbox.launch import stager
    from mha_grader.scan import scan

    deep = tmp_path / "deep.ipynb"
    deep.write_text('{"cells": ' + "[" * 200_000 + "]" * 200_000 + "}")
    paren = tmp_path / "paren.ipynb"
    paren.write_text(
        '{"cells": [{"cell_type": "code", "source": "x = ' + "(" * 100_000 + ")" * 100_000 + '"}]}'
    )
    got = scan(str(stager().engine()), {"deep": str(deep), "paren": str(paren)}, {"x"}, 30.0)
    assert "cannot read deep.ipynb as notebook JSON" in got["deep"]["error"], got["deep"]
    assert got["paren"]["uses"] == [] and len(got["paren"]["cells"]) == 1


EXOTIC = {  # (what make_causal_mask returns, whether a NumPy-only child can make it)
    "sparse": "torch.tril(torch.ones(L, S)).to_sparse()",
    "sparse_csr": "torch.tril(torch.ones(L, S)).to_sparse_csr()",
    "float8": "torch.tril(torch.ones(L, S)).to(torch.float8_e4m3fn)",
    "uint16": "torch.tril(torch.ones(L, S)).to(torch.uint16)",
    "quantized": "torch.quantize_per_tensor(torch.tril(torch.ones(L, S)), 0.1, 0, torch.qint8)",
    "nested": "torch.nested.nested_tensor([torch.ones(L, S)])",
    "meta": "torch.ones(L, S, device='meta')",
    "uint32_numpy": "__import__('numpy').ones((L, S), dtype='uint32')",
    "longdouble": "__import__('numpy').ones((L, S), dtype='longdouble')",
}


def test_exotic_arrays_are_a_wrong_type_not_a_crash(tmp_path):
    """Each exotic return value gets "wrong type" (and its unit goes on: the other items pass)."""
    _require_sandbox()
    jobs = {
        k: (
            build(
                "ex02",
                tmp_path / k / f"{EX02}.ipynb",
                replace={CAUSAL: f"def make_causal_mask(L, S):\n    return {v}\n"},
            ),
            "ex02",
        )
        for k, v in EXOTIC.items()
    }
    got = grade_many(jobs)
    for k, (res, _) in got.items():
        assert res[CAUSAL].status == "wrong type", (k, res[CAUSAL])
        assert all(r.passed for i, r in res.items() if i != CAUSAL), (k, res)


def test_a_big_endian_array_is_read_as_its_value():
    """A big-endian float32 array is converted to native order, not refused."""
    import numpy as np

    from mha_grader.sandbox.child import _to_array

    a = _to_array(np.arange(4, dtype=">f4"), np, None)
    assert a.dtype == np.float32 and a.dtype.isnative and a.tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- a container-sized budget (item 5)


class _Cgroup:
    """A memory-limited cgroup made by the test: v2 (``memory.max``) where the memory controller
    is on the unified hierarchy, else v1 (``memory.limit_in_bytes``); ``None`` from ``make`` with
    the reason when neither can be made here (not root, read-only /sys/fs/cgroup...)."""

    def __init__(self, path, v2: bool, pids=None) -> None:
        self.path, self.v2, self.pids = path, v2, pids  # pids: v1's pids folder, if limited

    @classmethod
    def make(cls, limit: int, pids: int | None = None):
        import os
        import uuid
        from pathlib import Path

        name = f"mha-test-{uuid.uuid4().hex[:8]}"
        for root, v2 in (
            (Path("/sys/fs/cgroup"), True),
            (Path("/sys/fs/cgroup/unified"), True),
            (Path("/sys/fs/cgroup/memory"), False),
        ):
            ctl = root / "cgroup.controllers"
            if v2 and not (ctl.is_file() and "memory" in ctl.read_text().split()):
                continue
            if not v2 and not (root / "memory.limit_in_bytes").is_file():
                continue
            try:
                if v2:
                    (root / "cgroup.subtree_control").write_text(
                        "+memory" + (" +pids" if pids else "")
                    )
                (root / name).mkdir()
                (root / name / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(
                    str(limit)
                )
                if v2 and (root / name / "memory.swap.max").exists():
                    (root / name / "memory.swap.max").write_text("0")
                folder = None
                if pids and v2:
                    (root / name / "pids.max").write_text(str(pids))
                elif pids:  # v1: its own hierarchy
                    folder = Path("/sys/fs/cgroup/pids") / name
                    folder.mkdir()
                    (folder / "pids.max").write_text(str(pids))
                return cls(root / name, v2, folder), ""
            except OSError as e:
                with __import__("contextlib").suppress(OSError):
                    (root / name).rmdir()
                why = f"{root}: {e}"
                continue
        return None, locals().get("why", f"no writable memory cgroup (uid {os.getuid()})")

    def enter(self) -> None:  # in the grader's preexec: the grader and all it starts are inside
        import os

        (self.path / "cgroup.procs").write_text(str(os.getpid()))
        if self.pids is not None:
            (self.pids / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int:
        f = self.path / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        return int(f.read_text()) if f.exists() else -1

    def oom_kills(self) -> int:
        f = self.path / ("memory.events" if self.v2 else "memory.oom_control")
        rows = dict(r.split()[:2] for r in f.read_text().splitlines() if len(r.split()) >= 2)
        return int(rows.get("oom_kill", 0))

    def remove(self) -> None:
        import time

        for path in (self.path, self.pids):
            for _ in range(50 if path is not None else 0):
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


HOSTILE = (
    "_bomb = b'x' * (3 << 30)  # 3 GiB: more than the whole class may use",
    "KIND = 'bytes'\n" + FILL,
    FLOOD,
)


def _leftovers(pid: int | None = None) -> set[str]:
    """The grader's temp folders (of grader ``pid``: they carry it) and every /dev/shm entry."""
    import os

    mine = ("mha-grade-", "mha-stage-", "mha-master-")
    return {f"/tmp/{n}" for n in os.listdir("/tmp") if n.startswith(mine) and f"-{pid}-" in n} | {
        f"/dev/shm/{n}" for n in os.listdir("/dev/shm")
    }


CGROUP_MB = 2048  # the class's memory (grader + children + their tmpfs pages)


def test_a_hostile_student_in_a_container_sized_budget(tmp_path):
    """The grader runs in a cgroup of 2 GiB with one student who bombs memory (3 GiB), fills
    her temp space and floods results (three cells), among two normal ones: alice and bob get full marks,
    the grader survives (the kernel's OOM killer takes the child: oom_score_adj 1000), its peak
    memory grows by under 300 MiB, and nothing is left in /tmp or /dev/shm."""
    _require_sandbox()
    cg, why = _Cgroup.make(CGROUP_MB * 2**20)
    if cg is None:
        pytest.skip(f"no memory-limited cgroup can be made here: {why}")
    before = _leftovers()  # (no pid: the shared memory entries only)
    try:
        got = _probe(_class(tmp_path, *HOSTILE), tmp_path / "out", cgroup=cg)
        peak, kills = cg.peak(), cg.oom_kills()
    finally:
        cg.remove()
    _normal_graded(got)
    assert not any(v == "passed" for v in got["status"]["mallory"].values()), got["status"]
    grew = (got["peak_kib"] - got["before_kib"]) / 1024
    assert grew < 300, f"the grader's peak memory grew by {grew:.0f} MiB"
    assert peak <= CGROUP_MB * 2**20, peak
    assert _leftovers(got["pid"]) <= before, _leftovers(got["pid"]) - before
    print(
        f"cgroup peak {peak / 2**20:.0f} MiB, OOM kills {kills}, grader {got['before_kib'] / 1024:.0f}"
        f" -> {got['peak_kib'] / 1024:.0f} MiB, {got['seconds']:.0f} s"
    )


def test_what_a_killed_grader_left_is_removed_on_the_next_start(tmp_path):
    """A grader killed mid-run (SIGKILL, OOM) leaves its run folder, with its tmpfs mounted when
    root; the next start (``space.sweep_stale``) unmounts and removes it, and leaves a live
    grader's folders alone. Alive means: it holds its folder's lock, whatever pid its name
    carries (a grader in another PID namespace: its pid is dead, or someone else's, here).
    (Before the fix: the sweep went by the pid in the name, and deleted the live folder.)"""
    import os
    import subprocess

    from mha_grader.sandbox import space

    proc = subprocess.Popen(["true"])
    proc.wait()
    dead = proc.pid  # a pid that has just exited
    stale = tmp_path / f"mha-grade-{os.getpid()}-abc"  # our own pid, but nobody holds its lock
    (stale / "run0" / "out").mkdir(parents=True)
    os.close(space.lock(stale))  # its grader took the lock, then died
    if space.can_mount():
        space._mount_tmpfs(str(stale / "run0" / "out"), 2**20, 64, "0700")
        (stale / "run0" / "out" / "x").write_text("left behind")
    elsewhere = tmp_path / f"mha-grade-{dead}-def"  # a live grader of another PID namespace
    elsewhere.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; "
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(elsewhere / space.LOCK),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        ours = tmp_path / f"mha-stage-{dead}-ghi"  # ours, held by this process (``space.held``)
        ours.mkdir()
        with space.held(ours):
            young = tmp_path / "mha-master-12345678"  # no lock yet (just made): left alone
            young.mkdir()
            old = tmp_path / "mha-master-87654321"  # no lock, and older than the grace: removed
            old.mkdir()
            os.utime(old, (0, 0))
            assert sorted(space.sweep_stale(str(tmp_path))) == sorted([str(stale), str(old)])
            assert ours.exists()
    finally:
        holder.kill()
        holder.wait()
    assert not stale.exists() and elsewhere.exists() and young.exists() and not old.exists()
    assert not any(str(tmp_path) in line for line in open("/proc/self/mounts"))
    assert sorted(space.sweep_stale(str(tmp_path))) == sorted([str(elsewhere), str(ours)])  # let go


# ---------------------------------------------------------------- a hostile class (issue #30: 1, 2, 4)

# Each cell leaves its processes running (setsid, outside the cell) and returns at once. The
# harness's os.fork/os.setsid stubs are a courtesy, not a boundary: libc's are one ctypes call away.
DECOYS = r"""
import ctypes, os, time
_libc = ctypes.CDLL(None)
if _libc.fork() == 0:  # a keeper: 36 decoys of 80 MiB each, re-spawned as they die
    _libc.setsid()
    _kids = set()
    while True:
        for _p in list(_kids):
            try:
                if os.waitpid(_p, os.WNOHANG)[0]:
                    _kids.discard(_p)
            except ChildProcessError:
                _kids.discard(_p)
        while len(_kids) < 36:
            _p = _libc.fork()
            if _p == 0:
                _hold = b"x" * (80 << 20)
                time.sleep(600)
                os._exit(0)
            if _p > 0:
                _kids.add(_p)
        time.sleep(0.05)
time.sleep(12)  # the cell holds its unit alive while the decoys live
"""
SPINNERS = r"""
import ctypes
_libc = ctypes.CDLL(None)
for _ in range(40):
    if _libc.fork() == 0:
        _libc.setsid()
        while True:
            pass
"""
FORK_BOMB = r"""
import ctypes
_libc = ctypes.CDLL(None)
if _libc.fork() == 0:
    _libc.setsid()
    while True:
        _libc.fork()
"""
CLASS_MB = 1536  # smaller than the guide's 2 GiB
OWN_CAUSES = (
    "out of memory: this submission's processes together",
    "too many processes: this submission tried",
    "wanted more CPU than the",
)


def test_a_hostile_student_cannot_take_a_classmate_down(tmp_path):
    """The class grader (2 workers) runs in a cgroup of 1.5 GiB and 2000 tasks with "adam", whose
    ex01 (NumPy: a small process) starts 36 decoys of 80 MiB (kept alive for 12 s), 40 busy loops
    and a fork bomb, beside alice and bob (ex02's solution: torch, the largest processes). Each
    student's sandbox is its own cgroup (cgroup.py), so the OOM killer, the pids limit and the CPU
    quota act in adam's alone: alice and bob get every item, adam's feedback names his own cause
    and theirs names none.
    (Before: no cgroup per student -- the OOM killer took the largest process of the class, a
    classmate's, whose feedback said "out of memory?", the busy loops and the fork bomb starved
    them until their stages timed out.)"""
    from mha_grader.sandbox import cgroup as student_cgroup

    _require_sandbox()
    if student_cgroup.problem():
        pytest.skip(f"no cgroup per student here: {student_cgroup.problem()}")
    cg, why = _Cgroup.make(CLASS_MB * 2**20, pids=2000)
    if cg is None:
        pytest.skip(f"no memory-limited cgroup can be made here: {why}")
    sub = tmp_path / "class"
    for s in ("alice", "bob"):
        build("ex02", sub / s / f"{EX02}.ipynb")
    build(
        "ex01",
        sub / "adam" / "ex01_dot_product_attention.ipynb",
        extra=[(0, DECOYS), (1, SPINNERS), (2, FORK_BOMB)],
    )
    try:
        got = _probe(sub, tmp_path / "out", cgroup=cg, ex="ex01,ex02")
        peak, kills = cg.peak(), cg.oom_kills()
        left = [p.name for p in cg.path.glob("mha-student-*")]  # every student's cgroup removed
    finally:
        cg.remove()
    for s in ("alice", "bob"):
        mine = {k: v for k, v in got["status"][s].items() if k.startswith("ex02")}
        assert mine and all(v == "passed" for v in mine.values()), (
            got["status"],
            got["feedback"][s],
        )
        assert not any(c in got["feedback"][s] for c in OWN_CAUSES), got["feedback"][s]
    assert any(c in got["feedback"]["adam"] for c in OWN_CAUSES), got["feedback"]["adam"]
    assert got["meta"]["resource_control"].startswith("a cgroup per student"), got["meta"]
    assert not left, left
    notes = [n for n in got["feedback"]["adam"].splitlines() if n.startswith("- ")]
    print(
        f"class cgroup peak {peak / 2**20:.0f} MiB, OOM kills there {kills}, {got['seconds']:.0f} s;"
        f" {got['meta']['resource_control']}; adam's notes: {notes}"
    )


def test_without_a_cgroup_the_status_says_so(tmp_path, monkeypatch):
    """Where no cgroup can be made (here: turned off), grading.json records it and the grader
    says so in one line; the student is still graded (per-process limits)."""
    import subprocess

    from grading_helpers import ROOT

    _require_sandbox()
    sub = tmp_path / "class"
    build("ex01", sub / "alice" / "ex01_dot_product_attention.ipynb")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "MHA_GRADER_CGROUPS": "off"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(sub), str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = __import__("json").loads(proc.stdout.split("PROBE", 1)[1])
    assert got["meta"]["resource_control"].startswith(
        "NO cgroup per student (MHA_GRADER_CGROUPS=off)"
    ), got["meta"]
    assert [line for line in proc.stderr.splitlines() if "no cgroup per student" in line], (
        proc.stderr[-2000:]
    )
    assert all(v == "passed" for v in got["status"]["alice"].values()), got["status"]


FORKS = r"""
import ctypes, os, time
_libc = ctypes.CDLL(None)
_n = 0
for _ in range(200):
    _p = _libc.fork()
    if _p == 0:
        time.sleep(2)
        os._exit(0)
    if _p < 0:
        break
    _n += 1
"""


def test_a_cell_cannot_fork_past_the_students_process_limit(tmp_path):
    """bubblewrap as root: a cell forks 200 children (libc's fork); the student's cgroup
    (pids.max: ``Limits.processes`` + the sandbox's own few) stops them, and the note names the
    student's own cause. (Before: the sandbox's user is root outside, which the kernel exempts
    from RLIMIT_NPROC -- even in a user namespace --: all 200 forks succeeded.)"""
    import os

    from mha_grader.sandbox import cgroup

    _require_sandbox()
    if os.geteuid() != 0:
        pytest.skip("bubblewrap as root is what this is about")
    if cgroup.problem():
        pytest.skip(f"no cgroup per student here: {cgroup.problem()}")
    check = (
        "if 0 < _n <= 72:\n        return torch.tril(torch.ones(L, S, dtype=torch.bool))\n"
        "    raise RuntimeError(f'forked {_n} children')"
    )
    nb = build(
        "ex02",
        tmp_path / "forks" / f"{EX02}.ipynb",
        replace={CAUSAL: f"def make_causal_mask(L, S):\n    {check}\n"},
        extra=[(2, FORKS)],
    )
    from mha_course.grading import items_for
    from mha_grader.runner import grade_submission

    results, notes = grade_submission({"nb": nb}, {"nb": items_for("ex02")}, 7, _limits(), "bwrap")[
        "nb"
    ]
    by_id = {r.id: r for r in results}
    stopped = any(
        "too many processes: this submission tried" in n
        for n in [*notes, *(r.message for r in results)]
    )
    assert by_id[CAUSAL].passed or stopped, (by_id[CAUSAL], notes)


SPIN_HERE = r"""
import ctypes
_libc = ctypes.CDLL(None)
for _ in range(3):
    if _libc.fork() == 0:
        while True:
            pass
while True:
    pass
"""


def test_a_stage_held_back_by_its_own_busy_processes_is_told_so(tmp_path):
    """A cell starts three busy loops and spins itself: four processes in a 1-core quota. It runs
    past its 4-s wall limit, and its note says its own processes wanted more CPU than its sandbox
    may use (not just "took too long"). (Before: no CPU quota per student, no such cause.)"""
    from mha_grader.sandbox import cgroup

    _require_sandbox()
    if cgroup.problem():
        pytest.skip(f"no cgroup per student here: {cgroup.problem()}")
    nb = build("ex02", tmp_path / "spin" / f"{EX02}.ipynb", extra=[(2, SPIN_HERE)])
    from mha_course.grading import items_for
    from mha_grader.runner import grade_submission

    results, notes = grade_submission(
        {"nb": nb}, {"nb": items_for("ex02")}, 7, _limits(item_timeout=4.0), "bwrap"
    )["nb"]
    assert any(
        "wanted more CPU than the 1 core(s) one student's sandbox may use" in n for n in notes
    ), notes
    assert all(r.passed for r in results), results

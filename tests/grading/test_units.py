"""Units of one student cannot help each other (issue #10, class 1: "reaching the reference anyway").

One sandbox runs a student's notebooks; inside it every *unit* (the items of a notebook that forbid
the same names) runs in its own process with its own staged course package, in which that unit's
forbidden functions are absent. ex04's ``mha_forward`` unit lacks the course's
``scaled_dot_product_attention``; the ``split_heads`` unit, which runs before it, has it. Each
attack below makes ``mha_forward`` right ONLY if it got the real function from elsewhere:

- ``sibling_course``: import it from another unit's staged course (paths from ``job.json``, or by
  listing the stage folder);
- ``handoff_tmp`` / ``handoff_out``: an earlier unit leaves the module's source in the sandbox's
  ``/tmp`` (or its results folder, or its home) and the later unit ``exec``-s it;
- ``straggler``: an earlier unit forks (ctypes' libc ``fork``, past the Python-level block) a
  server on an abstract unix socket that computes attention for the later unit;
- ``sysv_shared_memory``: an earlier unit leaves the source in a SysV shared memory segment;
- ``write_zygote_memory``: a unit opens the zygote's ``/proc/<pid>/mem`` for writing (from where
  it could change which course the next unit imports).

Shut by (see ``mha_grader/sandbox/confine.py``): Landlock in every unit (reads only the runtime, the
engine and ITS course; writes only its own results and temp folders), every other process of the
sandbox killed and the unit's temp folder removed before the next unit starts, unguessable stage
folder names; where Landlock is missing, one sandbox per unit (``MHA_GRADER_UNITS=sandbox`` forces
that path here). Every other item of the notebook must still pass.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid

import pytest
from grading_helpers import TEST_LIMITS, build, grade_many, require_user_mode

from mha_course.grading import items_for
from mha_grader.sandbox import confine, isolation

EX04 = "ex04_multi_head_attention"
FWD = "ex04_mha_forward"
TOKEN = uuid.uuid4().hex[:12]
MODE = os.environ.get(isolation.ENV_VAR) or "bwrap"

# A top-level cell: runs in EVERY unit (each unit re-runs the notebook's cells).
HELPERS = r'''
import ctypes, importlib, inspect, io, json, os, socket, struct, sys, time
import numpy as _np
_TOKEN = "{TOKEN}"
_NAME = "sdpa_" + _TOKEN + ".py"
_F = "scaled_dot_" + "product_attention"  # the parent searches the source for the name

def _real_sdpa():
    """This unit's course's scaled_dot_product_attention, if it is the real one (not a stub)."""
    try:
        import mha_course.ops.sdpa as s
        f = getattr(s, _F)
        return f if "ForbiddenCall" not in inspect.getsource(f) else None
    except BaseException:
        return None

def _drops():
    out = [sys.argv[-1], "/tmp", os.environ.get("TMPDIR", "/tmp"), os.path.expanduser("~"), "/dev/shm"]
    return [d for d in dict.fromkeys(out) if d]

def _leave_source():
    if _real_sdpa() is None:
        return
    src = inspect.getsource(sys.modules["mha_course.ops.sdpa"])
    for d in _drops():
        try:
            with open(os.path.join(d, _NAME), "w") as f:
                f.write(src)
        except BaseException:
            pass

def _found_source(where):
    for d in where:
        for root, _dirs, files in os.walk(d):
            if _NAME in files:
                try:
                    return open(os.path.join(root, _NAME)).read()
                except BaseException:
                    pass
    return None

def _exec_source(where):
    src = _found_source(where)
    if src is None:
        raise RuntimeError("attack failed: no source left by another unit")
    ns = {"__name__": "mha_course.ops.sdpa", "__package__": "mha_course"}
    exec(compile(src, "<left>", "exec"), ns)
    return ns[_F]

def _sibling_sdpa():
    import mha_course
    cands = []
    try:
        cands += json.load(open(os.path.join(sys.argv[-2], "job.json")))["read_only"]
    except BaseException:
        pass
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mha_course.__file__))))
    try:
        cands += [os.path.join(root, n) for n in sorted(os.listdir(root))]
    except BaseException:
        pass
    base, mods = list(sys.path), dict(sys.modules)
    try:
        for c in cands:
            for k in [k for k in sys.modules if k.split(".")[0] == "mha_course"]:
                del sys.modules[k]
            sys.path[:] = [c, *base]
            importlib.invalidate_caches()
            f = _real_sdpa()
            if f is not None:
                return f
    finally:  # this unit's own course again for everything else
        sys.path[:] = base
        sys.modules.update(mods)
    raise RuntimeError("attack failed: no sibling course with the real function")

def _send(sock, arrays):
    buf = io.BytesIO()
    _np.savez(buf, *arrays)
    data = buf.getvalue()
    sock.sendall(struct.pack("!Q", len(data)) + data)

def _recv(sock):
    def exactly(n):
        b = b""
        while len(b) < n:
            chunk = sock.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b
    n = struct.unpack("!Q", exactly(8))[0]
    with _np.load(io.BytesIO(exactly(n)), allow_pickle=False) as z:
        return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]

def _leave_server():
    f = _real_sdpa()
    if f is None or ctypes.CDLL(None).fork() != 0:
        return
    try:  # the straggler: outlives its unit, serves attention to later ones
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind("\0mha-" + _TOKEN)
        srv.listen(4)
        srv.settimeout(90)
        while True:
            conn, _ = srv.accept()
            with conn:
                q, k, v = (torch.from_numpy(a) for a in _recv(conn))
                _send(conn, [f(q, k, v).numpy()])
    finally:
        os._exit(0)

def _remote_sdpa(q, k, v):
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(20)
        c.connect("\0mha-" + _TOKEN)
    except OSError as e:
        raise RuntimeError("attack failed: no straggler") from e
    with c:
        _send(c, [t.detach().numpy() for t in (q, k, v)])
        return torch.from_numpy(_recv(c)[0])
'''

SHM = r"""
_KEY, _SIZE = 0x5EED0000 + int(_TOKEN[:4], 16), 1 << 20

def _shm(create):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(_KEY, _SIZE, (0o1000 | 0o600) if create else 0)  # IPC_CREAT
    if shmid < 0:
        raise RuntimeError("attack failed: no shared memory segment")
    return ctypes.c_void_p(libc.shmat(shmid, None, 0)).value

def _leave_in_shm():
    if _real_sdpa() is None:
        return
    data = inspect.getsource(sys.modules["mha_course.ops.sdpa"]).encode()
    addr = _shm(True)
    ctypes.memmove(addr, struct.pack("!Q", len(data)) + data, 8 + len(data))

def _sdpa_from_shm():
    addr = _shm(False)
    n = struct.unpack("!Q", ctypes.string_at(addr, 8))[0]
    ns = {"__name__": "mha_course.ops.sdpa", "__package__": "mha_course"}
    exec(compile(ctypes.string_at(addr + 8, n).decode(), "<shm>", "exec"), ns)
    return ns[_F]
"""

ZYGOTE = r'''
def _if_zygote_memory():
    """Right attention (the learner's own) only if this unit can open its zygote's memory for
    writing: with that it could rewrite which course the next unit imports."""
    with open(f"/proc/{os.getppid()}/mem", "r+b"):
        pass
    return lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1) @ v
'''

FORWARD = """
def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):
    from mha_course.attention.mha import merge_heads, split_heads
    sdpa = {GET}
    q, k, v = (split_heads(x @ W, num_heads) for W in (W_Q, W_K, W_V))  # (B, T, E) -> (B, H, T, D)
    heads = sdpa(q, k, v)  # (B, H, T, D)
    return merge_heads(heads) @ W_O, heads  # (B, H, T, D) -> (B, T, E); and the heads
"""

# name -> (code run at top level in every unit, how mha_forward gets sdpa)
ATTACKS = {
    "sibling_course": ("", "_sibling_sdpa()"),
    "handoff_tmp": (
        "_leave_source()",
        '_exec_source(["/tmp", os.environ.get("TMPDIR", "/tmp"), "/dev/shm", os.path.expanduser("~")])',
    ),
    "handoff_out": ("_leave_source()", "_exec_source([sys.argv[-1]])"),
    "straggler": ("_leave_server()", "_remote_sdpa"),
    "sysv_shared_memory": ("_leave_in_shm()", "_sdpa_from_shm()"),
    "write_zygote_memory": ("", "_if_zygote_memory()"),
}
# With one sandbox per unit the zygote holds only that unit's job: nothing to gain there.
LANDLOCK_ONLY = {"write_zygote_memory"}
UNITS = ["landlock", "sandbox"]
# One sandbox per unit starts Python and torch once per unit: on a loaded 2-core machine that can
# pass the test limits' per-student deadline, and a timeout would prove nothing about the attack.
LIMITS = dataclasses.replace(
    TEST_LIMITS, item_timeout=60.0, notebook_timeout=900.0, student_timeout=900.0
)


def _require() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the OS sandbox is Linux-only")
    if MODE == "user":
        require_user_mode()
    problem = isolation.bwrap_problem() if MODE == "bwrap" else isolation.user_problem()
    if problem:
        pytest.fail(f"the grading sandbox ({MODE}) cannot start here: {problem}")


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    _require()
    tmp = tmp_path_factory.mktemp("units")
    results = {}
    for units in UNITS:
        if units == "landlock" and confine.problem():
            continue  # test_landlock_is_available fails, saying why
        jobs = {}
        for name, (top, get) in ATTACKS.items():
            if units != "landlock" and name in LANDLOCK_ONLY:
                continue
            helpers = (HELPERS + SHM + ZYGOTE).replace(
                "{TOKEN}", f"{TOKEN}{units[0]}"
            ) + f"\n{top}\n"
            jobs[name] = (
                build(
                    "ex04",
                    tmp / units / name / f"{EX04}.ipynb",
                    extra=[(2, helpers)],
                    replace={FWD: FORWARD.replace("{GET}", get)},
                ),
                "ex04",
            )
        old = os.environ.get(confine.ENV_VAR)
        os.environ[confine.ENV_VAR] = units
        try:
            results[units] = grade_many(jobs, limits=LIMITS)
        finally:
            if old is None:
                del os.environ[confine.ENV_VAR]
            else:
                os.environ[confine.ENV_VAR] = old
    return results


def test_landlock_is_available():
    """CI's kernel has Landlock; without it the engine falls back to a sandbox per unit."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Landlock is Linux-only")
    assert confine.problem() is None, confine.problem()


@pytest.mark.parametrize("units", UNITS)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_unit_cannot_reach_the_reference_through_another_unit(name, units, attacked):
    if units not in attacked:
        pytest.skip(f"Landlock is not available here: {confine.problem()}")
    if name not in attacked[units]:
        pytest.skip("with one sandbox per unit, the zygote holds that unit only")
    res, notes = attacked[units][name]
    for item in items_for("ex04"):
        r = res[item.id]
        if item.id == FWD:
            assert (r.points, r.status) == (0.0, "error"), (
                f"the attack worked: {r.status}: {r.message} {notes}"
            )
        else:
            assert r.passed, f"{item.id}: {r.status}: {r.message} {notes}"


CAPABILITY_PROBE = r'''
import torch as _torch
_mha_forward = mha_forward

def mha_forward(*args, **kwargs):
    """Right only where torch runs the parent's CPU kernels."""
    out = _mha_forward(*args, **kwargs)
    return out if _torch.backends.cpu.get_cpu_capability() == "{CAPABILITY}" else tuple(2 * o for o in out)
'''


def test_a_confined_unit_computes_with_the_parents_cpu_kernels(tmp_path):
    """torch picks its CPU kernels (AVX2, AVX-512...) on first use, from /proc/cpuinfo, which a
    confined unit may not read: the zygote picks them before it forks (``child.main``). Without
    that, every confined unit ran torch's DEFAULT kernels, slower and rounding differently from the
    parent's reference (ex10's gradients were off by 1e-8 in float64)."""
    import torch

    _require()
    if confine.problem():
        pytest.skip(f"Landlock is not available here: {confine.problem()}")
    probe = CAPABILITY_PROBE.replace("{CAPABILITY}", torch.backends.cpu.get_cpu_capability())
    path = build("ex04", tmp_path / f"{EX04}.ipynb", extra=[(-1, probe)])
    res, notes = grade_many({"probe": (path, "ex04")}, limits=LIMITS)["probe"]
    assert res[FWD].passed, f"{res[FWD].status}: {res[FWD].message} {notes}"

"""The grader's trust boundary (issue #10): one attack per class, each shut by the OS sandbox,
the staged package or the parent's checks. Each attacked item returns the RIGHT answer only if
its attack worked, so "the attack failed" reads as that item failing with the expected status.

Runs under bubblewrap (``MHA_GRADER_ISOLATION`` unset: the strongest mode; set it to ``user`` to
run the same attacks under the dedicated-user fallback, see ``USER_BLOCKS``). Where the sandbox
cannot start on Linux these tests FAIL saying why; on other systems they are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from grading_helpers import ROOT, SOLUTIONS, TEST_LIMITS, build, grade_many, require_user_mode

from mha_course.grading import items_for
from mha_grader.sandbox import isolation

EX02 = "ex02_scaled_dot_product_attention"
CAUSAL, ATT = "ex02_causal_mask", "ex02_attention"
GOOD = "torch.tril(torch.ones(L, S, dtype=torch.bool))"
TOKEN = uuid.uuid4().hex[:12]
MODE = os.environ.get(isolation.ENV_VAR) or "bwrap"


def _require_sandbox() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the OS sandbox is Linux-only")
    if MODE == "user":
        require_user_mode()
    problem = isolation.bwrap_problem() if MODE == "bwrap" else isolation.user_problem()
    if problem:
        pytest.fail(f"the grading sandbox ({MODE}) cannot start here: {problem}")


def _causal(body: str) -> dict[str, str]:
    lines = "\n".join("    " + ln for ln in body.strip("\n").split("\n"))
    return {CAUSAL: f"def make_causal_mask(L, S):\n{lines}\n"}


def _if(cond: str) -> dict[str, str]:
    """make_causal_mask is right only if ``cond`` (the attack) holds inside the child."""
    return _causal(
        f"import os, sys, pathlib\nif {cond}:\n    return {GOOD}\nraise RuntimeError('attack failed')"
    )


# Attack helpers defined in a top-level cell of the submission (plain code, run in the child).
HELPERS = r"""
import os, sys, pathlib, ctypes
def _try(f):
    try:
        return bool(f())
    except BaseException:
        return False
def _read_parent():
    pids = [os.getppid()] + [int(p) for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        if pid == os.getpid():
            continue
        if _try(lambda: b"MHA_TEST_CANARY" in open(f"/proc/{pid}/environ", "rb").read()):
            return True
        if _try(lambda: os.path.isdir(f"/proc/{pid}/cwd/solutions")):
            return True
    return False
def _read_parent_cmdline():
    pids = [os.getppid()] + [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return any(_try(lambda: b"pytest" in open(f"/proc/{pid}/cmdline", "rb").read()) for pid in pids)
def _write_package():
    import mha_course
    done = False
    targets = [pathlib.Path(mha_course.__file__).parent / "_pwned_{TOKEN}.py"]
    targets += [pathlib.Path(p) / "_pwned_{TOKEN}.pth" for p in sys.path if p.endswith("site-packages")]
    for t in targets:
        done |= _try(lambda: t.write_text("print('pwned')") or True)
    return done
""".replace("{TOKEN}", TOKEN)

OUTLIVE = r"""
import ctypes, os
libc = ctypes.CDLL(None)
if libc.fork() == 0:
    libc.setsid()
    if libc.fork() == 0:
        argv = (ctypes.c_char_p * 4)(b"/bin/sh", b"-c", b"sleep 6.{TOKEN_NUM}; echo late > {MARKER}", None)
        envp = (ctypes.c_char_p * 1)(None)
        libc.execve(b"/bin/sh", argv, envp)
    os._exit(0)
"""

KILL_PARENT = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
pid = os.getppid()  # the grader, if the child can see it (only ever this one pid: it is a test)
fd = libc.syscall(434, pid, 0)  # pidfd_open
if fd >= 0:
    libc.syscall(424, fd, int(signal.SIGKILL), None, 0)  # pidfd_send_signal
"""

FORGE = r"""
def attention(query, key, value, attn_mask=None):
    import json, os, sys, zipfile, numpy as np
    def harness(name):  # a local of the harness's frames: this unit's results folder, the progress fd
        f = sys._getframe()
        while f is not None and name not in f.f_locals:
            f = f.f_back
        return f.f_locals[name]
    out = harness("out_dir")
    {FORGERY}
    os.pwrite(harness("progress"), ("done".ljust(100) + "\n").encode(), 0)
    if harness("job").get("progress_fd") is not None:  # and the stream the parent's clock reads
        os.write(harness("job")["progress_fd"], ("done".ljust(100) + "\n").encode())
    os._exit(0)
"""
FORGED_PASSED = (
    'json.dump({"status": "passed", "message": "all 4 cases match"}, '
    'open(os.path.join(out, "ex02_attention.json"), "w"))'
)
# A small file that declares a huge array: the old format (a compressed npz member that inflates
# ~1000x in the parent) and the protocol's (a raw .npy header declaring 3.2 GB).
BOMB = """zf = zipfile.ZipFile(os.path.join(out, "ex02_attention.npz"), "w", zipfile.ZIP_DEFLATED)
    with zf.open("c0_o0.npy", "w", force_zip64=True) as m:
        np.lib.format.write_array_header_1_0(m, {"descr": "<f8", "fortran_order": False, "shape": (381 * 2**17,)})
        chunk = bytes(2**20)
        for _ in range(381):
            m.write(chunk)
    zf.close()
    json.dump({"status": "ok", "n_outputs": [1]}, open(os.path.join(out, "ex02_attention.json"), "w"))"""
HUGE = """f = open(os.path.join(out, "ex02_attention__c0_o0.npy"), "wb")
    np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (20000, 20000)})
    f.close()
    json.dump({"status": "ok", "outputs": [[{"dtype": "float64", "shape": [20000, 20000]}]]},
              open(os.path.join(out, "ex02_attention.json"), "w"))"""

RELOAD = "import importlib, mha_course.ops.masks as m\nreturn importlib.reload(m).causal_mask(L, S)"
CLOSURE = """import mha_course.ops.masks as m
f = m.causal_mask
while getattr(f, "__closure__", None):
    f = next(c.cell_contents for c in f.__closure__ if getattr(c.cell_contents, "__name__", "") == "causal_mask")
return f(L, S)"""
DISARM = """import gc, mha_course.ops.masks
for o in gc.get_objects():
    if type(o).__name__ == "Tripwires":
        o.armed = set()
return mha_course.ops.masks.causal_mask(L, S)"""
# The package resolves its names lazily (``mha_course._EXPORTS``): point the table at every course
# module in turn, in case one of them still holds a real copy of the forbidden function.
LAZY_EXPORTS = """import inspect, pkgutil, mha_course
name = "causal_" + "mask"
for info in pkgutil.walk_packages(mha_course.__path__, "mha_course."):
    mha_course._EXPORTS[name] = info.name.split(".", 1)[1]
    vars(mha_course).pop(name, None)
    try:
        f = getattr(mha_course, name)
        real = "ForbiddenCall" not in inspect.getsource(f)
    except BaseException:
        continue
    if real:
        return f(L, S)
raise RuntimeError("no real copy")"""
SOLUTIONS_FROM_DISK = f"""import json, pathlib, mha_course
for root in (pathlib.Path(mha_course.__file__).resolve().parents[1], pathlib.Path({str(ROOT)!r})):
    p = root / "solutions" / "{EX02}.ipynb"
    if p.exists():
        cells = ["".join(c["source"]) for c in json.loads(p.read_text())["cells"]]
        ns = {{"torch": torch}}
        exec(next(c for c in cells if "def make_causal_mask" in c), ns)
        return ns["make_causal_mask"](L, S)
raise RuntimeError("no solutions here")"""

# name -> (attack class, build kwargs, {item: expected status}); other items must pass.
ATTACKS: dict[str, tuple[int, dict, dict[str, str]]] = {
    "reload_forbidden_module": (1, {"replace": _causal(RELOAD)}, {CAUSAL: "forbidden API"}),
    "tripwire_closure": (1, {"replace": _causal(CLOSURE)}, {CAUSAL: "forbidden API"}),
    "disarm_tripwires_via_gc": (1, {"replace": _causal(DISARM)}, {CAUSAL: "forbidden API"}),
    "solutions_from_disk": (1, {"replace": _causal(SOLUTIONS_FROM_DISK)}, {CAUSAL: "error"}),
    "lazy_exports": (1, {"replace": _causal(LAZY_EXPORTS)}, {CAUSAL: "error"}),
    "read_parent_environ_cwd": (
        2,
        {"extra": [(2, HELPERS)], "replace": _if("_read_parent()")},
        {CAUSAL: "error"},
    ),
    "read_parent_cmdline": (
        2,
        {"extra": [(2, HELPERS)], "replace": _if("_read_parent_cmdline()")},
        {CAUSAL: "error"},
    ),
    "read_peer_notebook": (
        2,
        {
            "extra": [(2, HELPERS)],
            "replace": _if("_try(lambda: 'make_causal_mask' in open({PEER!r}).read())"),
        },
        {CAUSAL: "error"},
    ),
    "overwrite_peer_notebook": (
        3,
        {
            "extra": [
                (2, HELPERS + "\nPWNED = _try(lambda: open({PEER!r}, 'a').write(' ') or True)")
            ],
            "replace": _if("PWNED"),
        },
        {CAUSAL: "error"},
    ),
    "append_to_installed_package": (
        3,
        {"extra": [(2, HELPERS + "\nPWNED = _write_package()")], "replace": _if("PWNED")},
        {CAUSAL: "error"},
    ),
    "symlink_in_own_results": (
        3,
        {
            "extra": [
                (
                    2,
                    "import os, sys\nos.symlink({VICTIM!r}, os.path.join(sys.argv[-1], 'ex02_scaled_scores.json'))",
                )
            ]
        },
        {},
    ),
    "outlive_with_empty_environment": (4, {"extra": [(2, OUTLIVE)]}, {}),
    "forged_passed_status": (
        6,
        {"replace": {ATT: FORGE.replace("{FORGERY}", FORGED_PASSED)}},
        {ATT: "invalid result"},
    ),
    "decompression_bomb": (
        6,
        {"replace": {ATT: FORGE.replace("{FORGERY}", BOMB)}},
        {ATT: "invalid result"},
    ),
    "huge_declared_shape": (
        6,
        {"replace": {ATT: FORGE.replace("{FORGERY}", HUGE)}},
        {ATT: "invalid result"},
    ),
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    _require_sandbox()
    tmp = tmp_path_factory.mktemp("isolation")
    peer = build("ex02", tmp / "peer" / f"{EX02}.ipynb")
    victim = tmp / "victim.txt"
    victim.write_text("untouched")
    marker = tmp / "late.txt"
    fill = {"{PEER!r}": repr(str(peer)), "{VICTIM!r}": repr(str(victim))}
    jobs = {}
    for name, (_, kw, _) in ATTACKS.items():
        kw = json.loads(json.dumps(kw))
        for key in ("replace",):
            for k, v in kw.get(key, {}).items():
                for a, b in fill.items():
                    v = v.replace(a, b)
                kw[key][k] = v
        extra = []
        for pos, src in kw.get("extra", []):
            for a, b in fill.items():
                src = src.replace(a, b)
            src = src.replace("{TOKEN_NUM}", str(int(TOKEN, 16) % 10**6)).replace(
                "{MARKER}", str(marker)
            )
            extra.append((pos, src))
        kw["extra"] = extra
        jobs[name] = (build("ex02", tmp / name / f"{EX02}.ipynb", **kw), "ex02")
    before = hashlib.sha256(peer.read_bytes()).hexdigest()
    os.environ["MHA_TEST_CANARY"] = TOKEN
    try:
        results = grade_many(jobs)
    finally:
        del os.environ["MHA_TEST_CANARY"]
    return results, {"peer": peer, "peer_hash": before, "victim": victim, "marker": marker}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_shut(name, attacked):
    results, _ = attacked
    res, notes = results[name]
    expect = ATTACKS[name][2]
    for item in items_for("ex02"):
        r = res[item.id]
        if item.id in expect:
            assert (r.points, r.status) == (0.0, expect[item.id]), (
                f"{item.id}: {r.status}: {r.message} {notes}"
            )
        else:
            assert r.passed, f"{item.id}: {r.status}: {r.message} {notes}"


def test_nothing_outside_the_sandbox_changed(attacked):
    _, env = attacked
    assert hashlib.sha256(env["peer"].read_bytes()).hexdigest() == env["peer_hash"], (
        "a peer's notebook changed"
    )
    assert env["victim"].read_text() == "untouched", (
        "the grader wrote through a submission's symlink"
    )
    import mha_course

    pkg = Path(mha_course.__file__).parent
    planted = list(pkg.glob(f"_pwned_{TOKEN}*")) + [
        p for sp in isolation.site_packages() for p in Path(sp).glob(f"_pwned_{TOKEN}*")
    ]
    for p in planted:
        p.unlink()
    assert not planted, f"a submission wrote into the installed package: {planted}"


def test_nothing_a_submission_started_outlives_it(attacked):
    _, env = attacked
    time.sleep(7.0)  # the escaped process would have written by now
    alive = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if f"6.{int(TOKEN, 16) % 10**6}".encode() in (p / "cmdline").read_bytes():
                alive.append(p.name)
        except OSError:
            continue
    assert not alive, f"processes started by a submission outlived grading: {alive}"
    assert not env["marker"].exists(), "a process started by a submission wrote after grading"


def test_a_submission_cannot_kill_the_grader(tmp_path):
    """Class 5: the grader runs in its own process here; the submission signals every pid it sees."""
    _require_sandbox()
    nb = build("ex02", tmp_path / "killer" / f"{EX02}.ipynb", extra=[(2, KILL_PARENT)])
    code = (
        "import sys; sys.path.insert(0, 'tests/grading'); from grading_helpers import grade_many;"
        f"r = grade_many({{'k': ({str(nb)!r}, 'ex02')}}); print('GRADED', sorted(r['k'][0]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert proc.returncode == 0 and "GRADED" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def _limits(**kw):
    from mha_grader.sandbox.launch import Limits

    fields = Limits.__dataclass_fields__
    return Limits(**{k: v for k, v in {**TEST_LIMITS.__dict__, **kw}.items() if k in fields})


def test_sleeping_cells_cannot_stretch_a_student(tmp_path):
    """Class 9: eight cells that sleep; the student's wall deadline (10 s) holds anyway."""
    _require_sandbox()
    nb = build(
        "ex02",
        tmp_path / "sleepy" / f"{EX02}.ipynb",
        extra=[(2, "import time\ntime.sleep(1000)")] * 8,
    )
    start = time.monotonic()
    res, _ = grade_many(
        {"s": (nb, "ex02")}, limits=_limits(item_timeout=3.0, student_timeout=10.0)
    )["s"]
    took = time.monotonic() - start
    assert took < 10.0 + 20.0, f"a sleeping submission held the grader for {took:.0f} s"
    assert any(r.status == "timeout" for r in res.values())


def test_cpu_limit_per_item(tmp_path):
    """Class 9: a spinning item is stopped by its CPU limit (2 s), long before its wall limit (60 s)."""
    _require_sandbox()
    nb = build(
        "ex02", tmp_path / "spin" / f"{EX02}.ipynb", replace=_causal("while True:\n    pass")
    )
    start = time.monotonic()
    res, _ = grade_many({"s": (nb, "ex02")}, limits=_limits(item_timeout=60.0, item_cpu=2.0))["s"]
    took = time.monotonic() - start
    assert res[CAUSAL].status == "timeout", res[CAUSAL]
    assert "CPU time" in res[CAUSAL].message, (
        f"stopped by the wall limit, not the CPU limit: {res[CAUSAL]}"
    )
    assert took < 120.0, f"the CPU limit did not stop the item ({took:.0f} s)"
    assert all(r.passed for k, r in res.items() if k != CAUSAL)


def test_staged_package_lacks_the_forbidden_source():
    """Class 1 at the source: the staged copy has a stub, not the code, for each forbidden def."""
    from mha_grader.sandbox.launch import stager

    course = stager().course(
        {"mha_course.ops.masks.causal_mask", "mha_course.ops.sdpa.scaled_dot_product_attention"}
    )
    masks = (course / "mha_course" / "ops" / "masks.py").read_text()
    sdpa = (course / "mha_course" / "ops" / "sdpa.py").read_text()
    assert (
        "ForbiddenCall('mha_course.ops.masks.causal_mask')" in masks
        and "tril" not in masks.split("def causal_mask")[1][:400]
    )
    assert "ForbiddenCall('mha_course.ops.sdpa.scaled_dot_product_attention')" in sdpa
    assert not list(course.rglob("*.ipynb")) and not (course / "solutions").exists()


def test_staged_packages_share_untouched_files_and_own_the_edited_ones():
    """Staged courses are hard links to one compiled master, except each edited module: stubbing
    a function in one course leaves it in the master and in every other course."""
    from mha_grader.sandbox.launch import stager

    plain = stager().course(set()) / "mha_course" / "ops"
    edited = stager().course({"mha_course.ops.masks.causal_mask"}) / "mha_course" / "ops"
    master = stager()._compiled_master() / "mha_course" / "ops"
    for course in (plain, master):
        assert "ForbiddenCall" not in (course / "masks.py").read_text()
        assert (
            "torch.tril("
            in (course / "masks.py").read_text().split("def causal_mask")[1].split("\ndef ")[0]
        )
    assert "ForbiddenCall('mha_course.ops.masks.causal_mask')" in (edited / "masks.py").read_text()
    assert not os.path.samefile(edited / "masks.py", master / "masks.py")
    assert os.path.samefile(edited / "sdpa.py", master / "sdpa.py")  # untouched: one file
    pyc = next((edited / "__pycache__").glob("masks.*.pyc"))
    assert not os.path.samefile(pyc, next((master / "__pycache__").glob("masks.*.pyc")))


def test_the_staged_package_holds_no_grading_policy():
    """No sandbox sees the course's items, references or mistakes (mha_course/grading/): only the
    drivers, the services' proxies and the seeded generators, none of which holds an answer, and
    a stand-in package whose check/hint do nothing and which refuses any other name. (Before, a
    built-name import of mha_course.grading.chapters.ch19 called its references.)"""
    from mha_course.grading import child
    from mha_grader.sandbox.launch import stager

    grading = stager().course(set()) / "mha_course" / "grading"
    assert sorted(p.name for p in grading.glob("*.py")) == ["__init__.py", "hints.py"]
    # the child/ folder, whole and nothing else: the layout is the wall
    kept = sorted(p.name for p in (grading / "child").glob("*.py"))
    assert kept == sorted(p.name for p in Path(child.__file__).parent.glob("*.py"))
    assert {p.name for p in grading.iterdir()} - {"__pycache__"} == {
        "__init__.py",
        "hints.py",
        "child",
    }
    assert not (grading / "chapters").exists() and not (grading / "oracles").exists()
    assert not list(grading.rglob("*.json"))
    assert "ForbiddenCall" in (grading / "__init__.py").read_text()


def test_unresolvable_forbidden_name_is_an_error():
    from mha_grader.stage import UnresolvedForbidden, check_forbidden

    check_forbidden(
        ["mha_course.ops.masks.causal_mask", "torch.nn.functional.scaled_dot_product_attention"]
    )
    for bad in (
        "mha_course.ops.masks.causal_mask_typo",
        "mha_course.causal_mask",
        "torch.nn.functional.no_such",
    ):
        with pytest.raises(UnresolvedForbidden, match=bad.rsplit(".", 1)[-1]):
            check_forbidden([bad])


def test_the_child_imports_no_torch_for_a_numpy_notebook(tmp_path):
    """The engine is light: a NumPy notebook that imports neither torch nor the course package
    runs without torch or matplotlib in the child (the child preloads matplotlib only for
    notebooks whose graded cells plot)."""
    import nbformat

    _require_sandbox()
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import sys\nHEAVY = sorted(m for m in ('torch', 'matplot' + 'lib') if m in sys.modules)"
            ),
            nbformat.v4.new_code_cell(
                "import numpy as np\ndef softmax(x, axis=-1):\n    assert not HEAVY, HEAVY\n"
                "    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
                "    return e / e.sum(axis=axis, keepdims=True)"
            ),
        ]
    )
    path = tmp_path / "np" / "ex01_dot_product_attention.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    res, notes = grade_many({"n": (path, "ex01")})["n"]
    assert res["ex01_softmax"].passed, (res["ex01_softmax"], notes)


def test_solutions_dir_exists_for_the_attack():
    assert (SOLUTIONS / f"{EX02}.ipynb").exists()  # else solutions_from_disk would prove nothing


def test_the_limit_tools_set_what_preexec_sets():
    """The bubblewrap child is started through choom, setpriv and prlimit (so Python can vfork):
    the process they exec has the OOM score, death signal and every limit ``_preexec`` sets."""
    import resource

    from mha_grader.sandbox.launch import Limits, _limit_argv, _rlimits

    prefix = _limit_argv(Limits(), 400, 3)
    if prefix is None:
        pytest.skip("util-linux's choom, setpriv or prlimit is missing (the child uses preexec_fn)")
    code = (
        "import ctypes, json, resource; sig = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); "  # PR_GET_PDEATHSIG
        "print(json.dumps({'oom': open('/proc/self/oom_score_adj').read().strip(), 'sig': sig.value, "
        "'limits': {n: list(resource.getrlimit(getattr(resource, 'RLIMIT_' + n))) "
        "for n in ('AS', 'CPU', 'FSIZE', 'CORE', 'NPROC')}}))"
    )
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    got = json.loads(out.stdout)
    assert got["oom"] == "1000" and got["sig"] == signal.SIGKILL
    assert got["limits"] == {n: list(v) for n, v in _rlimits(Limits(), 400, 3).items()}
    assert (
        resource.getrlimit(resource.RLIMIT_CPU)[0] != got["limits"]["CPU"][0]
    )  # not inherited from us

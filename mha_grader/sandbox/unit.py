"""One unit's life in its forked process: its own folders, its confinement, then its cells and
its items.

A unit is the items of a notebook that forbid the same names; the zygote (``child.py``) forks one
process per unit. In it, before any learner code, ``_enter_unit`` gives it its own temp folder
and, when the job says ``confine``, its own namespaces and Landlock rules (``confine.py``), and
``_cap_memory`` lowers its hard address-space limit where an item asks for a bound. Then
``_run_unit`` imports ITS staged course, runs the cells and calls each item (``calls.py``),
re-arming RLIMIT_CPU before each stage (``_arm_cpu``), and writes the results by the protocol.
The zygote imports this at start-up, before any confinement.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import os
import sys

from mha_grader.feedback import exception_report
from mha_grader.sandbox import channel, confine, defs_only
from mha_grader.sandbox.calls import _args, _run_item
from mha_grader.sandbox.tripwires import Tripwires, _block_processes

try:
    import resource
except ImportError:  # Windows: only the in-process check uses this module there
    resource = None

CONFINE_FAILED = 97  # exit code: a unit could not be confined (it ran no learner code)


def _arm_cpu(seconds: float) -> None:
    """Soft RLIMIT_CPU = CPU used so far + ``seconds`` (SIGXCPU ends the stage); hard stays."""
    if resource is None or not seconds:
        return
    try:
        used = resource.getrusage(resource.RUSAGE_SELF)
        now = used.ru_utime + used.ru_stime
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        want = int(now + seconds) + 1
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))
    except (OSError, ValueError):
        pass


def _cap_memory(mb: int) -> bool:
    """Lower the HARD address-space limit to (now + ``mb`` MiB), before any submission code runs:
    an unprivileged process cannot raise a hard limit again, so the bound holds whatever the
    submission does. False if it cannot be applied (the caller then fails the items closed)."""
    if resource is None:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = vm + mb * 2**20
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        return resource.getrlimit(resource.RLIMIT_AS) == (cap, cap)
    except (OSError, ValueError, StopIteration):
        return False


def _use_course(path: str, base: list[str]) -> None:
    """Import ``mha_course`` from this notebook's staged copy from now on."""
    for name in [m for m in sys.modules if m == "mha_course" or m.startswith("mha_course.")]:
        del sys.modules[name]
    sys.path[:] = [path, *base]
    importlib.invalidate_caches()


def _run_unit(
    nb: dict, job: dict, arrays: dict, wires: Tripwires, mark, cpu: float, out_dir: str, np, torch
) -> None:
    """Run one unit (a notebook's cells, then the items that share its forbidden names)."""
    from mha_grader.sandbox import protocol

    _use_course(nb["course"], job["_base"])
    ns: dict = {"__name__": "__main__", "__builtins__": builtins}  # a fresh namespace
    cell_errors = []
    defs = nb.get("defs_only")  # run the decorated definitions only, checked (defs_only.py)
    cells = defs_only.extract_cells(nb["cells"], defs) if defs else nb["cells"]
    if not defs:
        _block_processes()  # before any learner code (a defs-only unit: after its checks)
    for mod in defs["setup"] if defs else ():
        importlib.import_module(mod)
    # Forbidden APIs fail in the cells too (no answers precomputed at top level); no penalty.
    wires.armed = {n for it in nb["items"] for n in it["forbidden"]}
    for cell in cells:
        mark(protocol.cell_stage(nb["name"], cell["index"]))
        _arm_cpu(cpu)
        try:
            exec(compile(cell["source"], f"<cell {cell['index']}>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - a broken cell must not stop the others
            cell_errors.append({"index": cell["index"], **exception_report(e)})
    wires.armed, wires.hits = set(), set()
    protocol.write_cells(out_dir, cell_errors)
    if defs:
        ns[defs_only.EXTRACTED] = [(f"<cell {c['index']}>", c["source"]) for c in cells]
    for k, item in enumerate(nb["items"]):
        mark(protocol.item_stage(item["id"]))
        _arm_cpu(cpu)
        # A defs-only item: compiled first, in its own stage (a refused kernel never runs); no
        # more processes once the last is checked (a kernel that ran before compiled: its body
        # calls nothing but the kernel language).
        refused = _check_def(item, defs, ns, arrays, np, torch) if defs else None
        if defs and k == len(nb["items"]) - 1:
            _block_processes()
        if refused is not None and not item.get("static_forbidden"):  # that names more
            protocol.write_result(out_dir, item["id"], refused, [])
            continue
        status, saved = _run_item(item, ns, arrays, wires, np, torch)
        outs = (
            [[saved[f"c{i}_o{j}"] for j in range(n)] for i, n in enumerate(status["n_outputs"])]
            if status["status"] == "ok"
            else []
        )
        protocol.write_result(out_dir, item["id"], status, outs)


def _check_def(item: dict, defs: dict, ns: dict, arrays: dict, np, torch) -> dict | None:
    """A defs-only item's check (``DefsOnly.check``) on all its cases' arguments: None if it
    passed (or there is no function: "missing function", as in any unit), "not implemented" for
    the untouched stub, else its "not compiled" status. A check that fails fails closed."""
    fn = ns.get(item["function"])
    if fn is None:
        return None
    if defs_only.unwritten(ns[defs_only.EXTRACTED], item["function"]):
        return {"status": "not implemented"}
    try:
        mod, _, name = (item.get("driver") or ":").partition(":")
        driver = getattr(importlib.import_module(mod), name) if mod else None
        cases = [_args(c, arrays, item["framework"], np, torch) for c in item["cases"]]
        check = defs_only.check(defs)
        verdict = check(fn, driver, cases, ns[defs_only.EXTRACTED], float(defs["wall_s"]))
    except Exception as e:  # noqa: BLE001 - the learner's definitions broke the check
        verdict = {"verdict": defs_only.REFUSED, **exception_report(e)}
    return None if verdict is None else {"status": "not compiled", **verdict}


def _unit_dirs(nb: dict, out_dir: str) -> tuple[str, str]:
    """The unit's own results folder (``out/<dir>``) and temp folder (``$HOME/<dir>``), new."""
    name = nb["dir"]
    if not (name.startswith("u") and name[1:].isdigit()):
        raise ValueError(f"unit folder: expected u<number>, got {name!r}")
    unit_out = os.path.join(out_dir, name)
    unit_tmp = os.path.join(os.environ.get("HOME") or "/tmp", name)
    for d in (unit_out, unit_tmp):
        os.mkdir(d, 0o700)
    return unit_out, unit_tmp


def _enter_unit(nb: dict, job: dict, unit_out: str, unit_tmp: str) -> None:
    """In the forked unit, before any learner code: its own temp folder, then (``job["confine"]``)
    its own namespaces and Landlock rules (``confine.py``): it reads only the runtime and ITS
    course, writes only its own folders."""
    import tempfile

    for var in ("HOME", "TMPDIR", "MPLCONFIGDIR"):
        os.environ[var] = unit_tmp
    tempfile.tempdir = None
    os.chdir(unit_tmp)
    if job.get("confine"):
        run = confine.interpreter_files() if nb.get("defs_only") else []  # its checks' process
        confine.confine_unit([*job["_base"], nb["course"]], [unit_out, unit_tmp], run)


def _unit_process(
    nb: dict,
    job: dict,
    arrays: dict,
    wires: Tripwires,
    mark,
    cpu: float,
    unit_out: str,
    unit_tmp: str,
    np,
    torch,
) -> None:
    """The forked unit's whole life; never returns."""
    from mha_grader.sandbox import protocol

    mark.owner[0] = os.getpid()  # this unit names its stages; a process its cells fork does not
    try:
        for other in job["notebooks"]:  # a unit reaches only its own grader channel
            if other is not nb and other.get("channel_fd") is not None:
                with contextlib.suppress(OSError):
                    os.close(other["channel_fd"])
        for fd in (job.get("next_fd"), job.get("ready_fd")):  # the zygote's, with the parent
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        channel.connect(nb.get("channel_fd"))
        try:
            _enter_unit(nb, job, unit_out, unit_tmp)
        except confine.ConfineFailed:
            os._exit(CONFINE_FAILED)
        cap = min((int(it["memory_mb"]) for it in nb["items"] if it.get("memory_mb")), default=0)
        if cap and not _cap_memory(cap):  # the bound can't be enforced here: fail closed
            for item in nb["items"]:
                protocol.write_result(unit_out, item["id"], {"status": "memory limit"}, [])
            mark(protocol.unit_end_stage(nb["name"]))
            os._exit(0)
        _run_unit(nb, job, arrays, wires, mark, cpu, unit_out, np, torch)
        mark(protocol.unit_end_stage(nb["name"]))
    finally:
        os._exit(0)

"""Grade one student's submission (one or more notebooks) in ONE sandboxed child at a time.

The parent has each notebook read (as JSON, never run) in a limited process (``scan.py``), makes
the cases from the seed, sends the child only inputs (never references), and judges what comes
back, item by item, as soon as it is read (steps: ``grade_submission``'s docstring). When a
cell or an item hangs or kills the child, that stage gets its status (timeout / crashed / memory
limit), and a fresh child runs the rest without it, so every other item is still graded.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from mha_grader import compare as C
from mha_grader import substitute
from mha_grader.feedback import cell_note
from mha_grader.items import STATIC_FORBIDDEN, Case, Dtype, Item
from mha_grader.plan import Graded, Plan
from mha_grader.sandbox import cgroup, channel, confine, isolation, protocol, space
from mha_grader.sandbox.child import CONFINE_FAILED
from mha_grader.sandbox.launch import (
    CPU_BOUND,
    DISK_FULL,
    OUT_OF_MEMORY,
    TAMPERED,
    TOO_MANY_PROCESSES,
    Limits,
    run_child,
    stager,
)
from mha_grader.sandbox.threads import one_torch_thread
from mha_grader.scan import ScanFailed, scan, used_names


def static_forbidden(cells: list[dict], names: set[str]) -> set[str]:
    """Forbidden distinctive names used in the source (attribute, import, name or exact string)."""
    return _banned(used_names(cells), names)


def _banned(used: set[str], names: set[str]) -> set[str]:
    return {n for n in names if n.rsplit(".", 1)[-1] in used & STATIC_FORBIDDEN}


def encode_cases(item: Item, cases: list[Case], arrays: dict) -> list[list[dict]]:
    """Cases -> JSON-able argument specs; arrays go into ``arrays`` (saved as a non-pickle npz)."""
    out = []
    for i, case in enumerate(cases):
        spec = []
        for k, (name, v) in enumerate(case.items()):
            if name in item.hidden:  # only the parent's service needs it
                spec.append({"value": None})
            elif isinstance(v, np.ndarray):
                key = f"{item.id}__c{i}__a{k}"
                arrays[key] = v
                spec.append({"array": key})
            elif isinstance(v, Dtype):
                spec.append({"dtype": v.name})
            else:
                spec.append({"value": v})
        out.append(spec)
    return out


def _servers(
    todo: dict[str, list[Item]], cases: dict[str, list[Case]]
) -> dict[str, channel.Server]:
    """One evidence channel per unit that holds items with a ``service`` (see channel.py)."""
    out = {}
    for u, its in todo.items():
        factories = {
            it.id: (lambda i, it=it: it.service(cases[it.id][i])) for it in its if it.service
        }
        if factories:
            out[u] = channel.Server(factories, {i: len(cases[i]) for i in factories})
    return out


# Heavy modules that the cells of a notebook may import (by words in their text): the child
# imports them once, before it forks its units, instead of once per unit. Only a miss costs
# (time); the child imports nothing outside child.PRELOADABLE.
_PRELOAD = {
    "matplotlib.pyplot": ("matplotlib", "plot_attention", "plot_heads"),
    "torch.utils.flop_counter": ("flop_counter",),
}
# (not torch._dynamo, which every optimizer step imports: the child stands in for it until
# something needs the real one, see eager.py)


def _preload(cells: list[dict]) -> list[str]:
    """The modules of ``_PRELOAD`` that these cells will import."""
    text = "\n".join(c["source"] for c in cells)
    return [mod for mod, words in _PRELOAD.items() if any(w in text for w in words)]


def _why(killed: str | None, code: int | None, limits: Limits) -> tuple[str, str]:
    if killed == DISK_FULL:
        return C.DISK, (
            f"filled its writable space (temp: {limits.disk_mb} MiB, {limits.disk_files} "
            f"files; results: {limits.result_mb} MiB)"
        )
    if killed == TAMPERED:
        return (
            C.INVALID_RESULT,
            "the submission wrote the grader's progress file (stages out of order)",
        )
    if killed in (OUT_OF_MEMORY, TOO_MANY_PROCESSES):  # the kernel, in this student's own cgroup
        return C.CRASHED, cgroup.message(
            cgroup.MEMORY if killed == OUT_OF_MEMORY else cgroup.PROCESSES, limits.bounds()
        )
    if killed == CPU_BOUND:
        return C.TIMEOUT, cgroup.message(cgroup.CPU, limits.bounds())
    if code is not None and code > 128:  # bubblewrap reports a signal as 128 + its number
        code = -(code - 128)
    if killed or code == -signal.SIGXCPU:
        return C.TIMEOUT, ("took too long" if killed else "used too much CPU time")
    if code == -signal.SIGKILL:
        return C.CRASHED, (
            "the process was killed (SIGKILL)"
            if cgroup.problem() is None
            else "the process was killed (SIGKILL: out of memory?)"
        )
    if code == -signal.SIGXFSZ:
        return C.CRASHED, "wrote a file larger than the limit"
    if code == CONFINE_FAILED:
        return C.CRASHED, "the sandbox could not confine this notebook's code (Landlock)"
    if code is not None and code < 0:
        return C.CRASHED, f"the process died of signal {-code}"
    return C.CRASHED, f"the process exited here (exit code {code}: os._exit, or a crash)"


def _units(
    cells: dict[str, list[dict]], items: dict[str, list[Item]]
) -> dict[str, tuple[str, list[Item]]]:
    """Units: the items of a notebook that forbid the same names, ``{"<stem>~<k>": (stem, items)}``.
    Each unit runs the notebook's cells in its own process with its own staged package (see
    child.py), so every item is graded with exactly its own forbidden functions absent; items
    that run only the notebook's definitions (``defs_only``) never share a unit with others."""
    units: dict[str, tuple[str, list[Item]]] = {}
    for name in cells:
        groups: dict[tuple, list[Item]] = {}
        for it in items[name]:
            groups.setdefault((frozenset(it.forbidden), it.defs_only), []).append(it)
        for g, its in enumerate(groups.values()):
            units[f"{name}~{g}"] = (name, its)
    return units


def grade_submission(
    notebooks: dict[str, Path],
    items: dict[str, list[Item]],
    seed: int,
    limits: Limits | None = None,
    isolation_mode: str | None = None,
) -> dict[str, Graded]:
    """Grade several notebooks of one student: ``{name: path}``, ``{name: items}`` -> ``{name: graded}``.

    The steps (see the package docstring): 1. plan (``_plan``: read the notebooks in a limited
    process, make the cases, group items into units); then, until every item is settled or the
    student's deadline passes: 2. run a child on what is left (``_run``), 3. read back and
    4. judge each item the child finished, at once (``_read_back``), 5. learn from where the
    child stopped (``_after``: skip a cell, blame an item, or stop).

    A unit holding an item with a ``memory_mb`` bound gets its address space capped by the
    kernel before any submission code runs (see ``Item.memory_mb`` and ``child._cap_memory``).

    ``isolation_mode``: ``"bwrap"``, ``"user"`` or ``"none"`` (default: the strongest available,
    or ``MHA_GRADER_ISOLATION``; "none" if nothing is, since this is also the self-check path).
    """
    with one_torch_thread():
        return _grade(
            notebooks,
            items,
            seed,
            limits or Limits(),
            isolation_mode or isolation.choose(allow_none=True),
        )


def _grade(
    notebooks: dict[str, Path], items: dict[str, list[Item]], seed, limits: Limits, mode: str
) -> dict[str, Graded]:
    with cgroup.student(limits.bounds()) as group:  # the student's accounted unit (or None)
        return _grade_in(notebooks, items, seed, limits, mode, group)


def _grade_in(
    notebooks: dict[str, Path],
    items: dict[str, list[Item]],
    seed,
    limits: Limits,
    mode: str,
    group: cgroup.Group | None,
) -> dict[str, Graded]:
    plan = _plan(notebooks, items, seed, limits, group)
    with tempfile.TemporaryDirectory(prefix=space.run_prefix()) as tmp, space.held(tmp):
        os.chmod(tmp, 0o711)  # mode "user": the child's uid may pass through to its own run only
        _settle_units(plan, Path(tmp) / "first", limits, mode, group)
        # a wrong earlier task costs only its own points: later items it broke, once more
        if plan.retry():
            plan.courses.update(
                {
                    u: str(stager().course(_staged_out(plan, its)))
                    for u, (_, its) in plan.units.items()
                    if u not in plan.courses
                }
            )
            _settle_units(plan, Path(tmp) / "second", limits, mode, group)
    return plan.graded()


def _settle_units(
    plan: Plan, tmp: Path, limits: Limits, mode: str, group: cgroup.Group | None
) -> None:
    """Steps 2-5 until every unit's items are settled (or the student's time is up)."""
    one_unit = confine.unit_mode(mode) == "sandbox"  # no Landlock here: one sandbox per unit
    tmp.mkdir()
    for attempt in range(plan.max_runs()):
        todo = plan.todo(one_unit)
        if not todo:
            break
        if time.monotonic() > plan.deadline:
            plan.settle_all(todo, C.TIMEOUT, "the submission ran out of time")
            break
        root = tmp / f"run{attempt}"
        try:
            spec, servers, (stage, killed, code) = _run(plan, todo, root, limits, mode, group)
            _read_back(plan, todo, root / "out", servers, protocol.stage_plan(spec), stage)
        finally:
            space.release(root)
        if not _after(plan, todo, stage, killed, code, limits):
            break


def _staged_out(plan: Plan, its: list[Item]) -> set[str]:
    """What a unit's staged course lacks: its items' forbidden names, and every substitute but
    the ones its (retried) items may use (``substitute.py``)."""
    own = {p for it in its for p in plan.swaps.get(it.id, {}).values()}
    return {f for it in its for f in it.forbidden} | (plan.stubbed - own)


def _plan(
    notebooks: dict[str, Path],
    items: dict[str, list[Item]],
    seed,
    limits: Limits,
    group: cgroup.Group | None = None,
) -> Plan:
    """Step 1: the student's deadline, cases, cells (read by ``scan.scan``, within the deadline)
    and units."""
    # One wall deadline per student (restarts included): sleeping cannot stretch it.
    deadline = time.monotonic() + min(
        limits.student_timeout, limits.notebook_timeout * max(1, len(notebooks))
    )
    plan = Plan(
        notebooks,
        items,
        {it.id: it.cases(seed) for n in notebooks for it in items[n]},
        deadline,
        limits.result_mb * 2**20,
        public=isinstance(seed, (int, np.integer)),
    )
    for name, got in _scan(notebooks, limits, deadline, group).items():
        if "error" in got:
            plan.note(name, got["error"])
            for it in items[name]:
                plan.settle(it, {"status": C.INVALID_NOTEBOOK, "parent_message": got["error"]})
        else:
            plan.cells[name] = got["cells"]
            plan.syntax[name] = {int(i): e for i, e in got.get("syntax", {}).items()}
            plan.graphs[name] = {f: set(n) for f, n in got.get("graph", {}).items()}
            plan.banned[name] = _banned(
                set(got["uses"]), {f for it in items[name] for f in it.forbidden}
            )
    plan.units = _units(plan.cells, items)
    plan.stubbed = substitute.stubbed(it for n in plan.cells for it in items[n])
    plan.courses = {
        u: str(stager().course(_staged_out(plan, its))) for u, (_, its) in plan.units.items()
    }
    plan.dirs = {u: f"u{k}" for k, u in enumerate(plan.units)}  # each unit's own results folder
    return plan


def _scan(
    notebooks: dict[str, Path], limits: Limits, deadline: float, group: cgroup.Group | None = None
) -> dict[str, dict]:
    """Every notebook read in one limited process (in the student's cgroup); if that fails, each
    alone (to name the one)."""
    engine = str(stager().engine())
    prefix = group.argv() if group is not None else []

    def wall() -> float:
        return max(1.0, min(limits.item_timeout, deadline - time.monotonic()))

    paths = {n: str(p) for n, p in notebooks.items()}
    try:
        return scan(engine, paths, STATIC_FORBIDDEN, wall(), prefix)
    except ScanFailed as e:
        if len(paths) == 1:
            return {
                n: {"error": f"{Path(p).name} could not be read within the grader's limits: {e}"}
                for n, p in paths.items()
            }
    out = {}
    for n, p in paths.items():
        try:
            out.update(scan(engine, {n: p}, STATIC_FORBIDDEN, wall(), prefix))
        except ScanFailed as e:
            out[n] = {"error": f"{Path(p).name} could not be read within the grader's limits: {e}"}
    return out


def _run(
    plan: Plan,
    todo: dict[str, list[Item]],
    root: Path,
    limits: Limits,
    mode: str,
    group: cgroup.Group | None = None,
):
    """Step 2: one child on ``todo``; returns (its job spec, the evidence servers, its outcome)."""
    arrays: dict[str, np.ndarray] = {}
    servers = _servers(todo, plan.cases)  # the parent's side of the evidence channels
    socks = {u: srv.start() for u, srv in servers.items()}
    nb_of = {u: plan.units[u][0] for u in todo}
    spec = {
        "needs_torch": any(
            it.framework == "torch" or any(not f.startswith("mha_course.") for f in it.forbidden)
            for its in todo.values()
            for it in its
        ),
        "preload": _preload([c for u in todo for c in plan.cells[nb_of[u]]]),
        "sys_path": isolation.site_packages(),
        "item_cpu": limits.item_cpu,
        "confine": confine.unit_mode(mode) == "landlock",
        "read_only": sorted({plan.courses[u] for u in todo}),
        "notebooks": [
            {
                "name": u,
                "dir": plan.dirs[u],
                "course": plan.courses[u],
                "channel_fd": socks[u].fileno() if u in socks else None,
                "defs_only": its[0].child_spec()["defs_only"],
                "cells": [
                    c for c in plan.cells[nb_of[u]] if (nb_of[u], c["index"]) not in plan.skip
                ],
                "items": [
                    {
                        **it.child_spec(),
                        "substitutes": plan.swaps.get(it.id, {}),
                        "cases": encode_cases(it, plan.cases[it.id], arrays),
                        "static_forbidden": sorted(plan.banned[nb_of[u]] & set(it.forbidden)),
                    }
                    for it in its
                ],
            }
            for u, its in todo.items()
        ],
    }
    try:
        outcome = run_child(
            root,
            spec,
            arrays,
            limits,
            plan.deadline,
            mode,
            pass_fds=[sk.fileno() for sk in socks.values()],
            group=group,
        )
    finally:
        for sk in socks.values():
            sk.close()
        for srv in servers.values():
            srv.stop()
    return spec, servers, outcome


def _read_back(
    plan: Plan,
    todo: dict[str, list[Item]],
    out: Path,
    servers: dict,
    stage_plan: list[str],
    stage: str,
) -> None:
    """Steps 3 and 4: each item the harness finished before ``stage``, read from ITS unit's folder
    within the student's byte budget, judged at once (its arrays are not kept)."""
    trusted = protocol.finished_items(stage_plan, stage)
    for u, its in todo.items():
        name, where = plan.units[u][0], protocol.unit_dir(out, plan.dirs[u])
        for it in its:
            if it.id not in trusted:
                continue
            res = _read_result(out, plan.dirs[u], where, it, plan)
            if res is not None and it.service is not None:
                res = servers[u].finish(it.id, res)  # judged on the parent's evidence
            if res is not None:
                plan.settle(it, res)
        for e in protocol.read_cells(where) if where is not None else []:
            plan.note(name, cell_note(e, plan.lines(name)))


def _read_result(out: Path, unit: str, where: Path | None, item: Item, plan: Plan) -> dict | None:
    """The item's result by the protocol; ``None`` if the child wrote none, ``invalid result`` if
    what it wrote breaks the protocol (forged, truncated, oversized, a link...) or the budget."""
    if where is None:
        return (
            None
            if not os.path.lexists(out / unit)
            else {
                "status": C.INVALID_RESULT,
                "parent_message": "the result breaks the protocol: not a folder",
            }
        )
    try:
        doc = protocol.read_result(where, item.id, budget=plan.budget)  # only the protocol's fields
    except FileNotFoundError:
        return None
    except protocol.Invalid as e:
        return {
            "status": C.INVALID_RESULT,
            "parent_message": f"the result breaks the protocol: {e}"[:300],
        }
    plan.budget -= sum(a.nbytes for outs in doc.get("outputs", []) for a in outs)
    return doc


def _after(
    plan: Plan,
    todo: dict[str, list[Item]],
    stage: str,
    killed: str | None,
    code: int | None,
    limits: Limits,
) -> bool:
    """Step 5: what the child's last stage teaches; False when nothing more can be learned."""
    if killed == DISK_FULL:
        for u in todo:
            plan.note(
                plan.units[u][0],
                f"{_why(killed, code, limits)[1]}: the write that did not fit failed",
            )
    if stage == protocol.DONE:  # all of todo ran; one sandbox per unit: on to the next unit
        status, why = (C.CRASHED, "no result") if killed is None else _why(killed, code, limits)
        plan.settle_all(todo, status, why)
        return True
    status, why = _why(killed, code, limits)
    cell, item = protocol.parse_cell_stage(stage), protocol.parse_item_stage(stage)
    if killed == TAMPERED:  # learner code writes the progress: no stage can be trusted
        plan.settle_all(todo, status, why)
        return False
    if cell is not None and cell[0] in todo and (plan.units[cell[0]][0], cell[1]) not in plan.skip:
        name = plan.units[cell[0]][0]
        plan.skip.add((name, cell[1]))
        plan.note(name, f"cell {cell[1]}: {status} ({why}); skipped, grading went on without it")
        return True
    hit = next((it for its in todo.values() for it in its if it.id == item), None)
    if hit is not None:
        plan.settle(hit, {"status": status, "parent_message": why})
        return True
    plan.settle_all(todo, status, f"{why} before grading")  # died before or outside any stage
    return False


def grade_notebook(
    path: str | Path,
    items: list[Item],
    seed: int,
    limits: Limits | None = None,
    isolation_mode: str | None = None,
) -> Graded:
    """Grade ``items`` of one notebook in a child; returns (results, notes)."""
    return grade_submission({"nb": Path(path)}, {"nb": items}, seed, limits, isolation_mode)["nb"]

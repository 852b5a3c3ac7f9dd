"""Grade one student's submission (one or more notebooks) in ONE sandboxed child at a time.

The parent has each notebook read (as JSON, never run) in a limited process (``scan.py``), makes
the cases from the seed, sends the child only inputs (never references), and judges what comes
back, item by item, as soon as it is read (steps: ``grade_submission``'s docstring). When a
cell or an item hangs or kills the child, that stage gets its status (timeout / crashed / memory
limit), and a fresh child runs the rest without it, so every other item is still graded.

Here: the loop over the steps (``grade_submission``) and step 1, the plan (``_plan``). Step 2,
the child's job and its run, is ``job.py``; steps 3 and 4, reading back and judging,
``read_back.py``; step 5, what a stopped child teaches, ``learn.py``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from mha_grader import compare as C
from mha_grader import substitute
from mha_grader.items import STATIC_FORBIDDEN, Item
from mha_grader.job import (  # noqa: F401 - re-exported: runner.py's names before its split
    _run,
    encode_cases,
)
from mha_grader.learn import _after
from mha_grader.plan import Graded, Plan
from mha_grader.read_back import _read_back
from mha_grader.sandbox import cgroup, confine, isolation, protocol, space
from mha_grader.sandbox.launch import Limits, stager
from mha_grader.sandbox.threads import one_torch_thread
from mha_grader.sandbox.tripwires import ALIASES
from mha_grader.sandbox.watch import Held
from mha_grader.scan import ScanFailed, scan, used_names


def static_forbidden(cells: list[dict], names: set[str]) -> set[str]:
    """Forbidden distinctive names used in the source (attribute, import, name or exact string)."""
    return _banned(used_names(cells), names)


def _banned(used: set[str], names: set[str]) -> set[str]:
    """The forbidden ``names`` whose distinctive last part, or an alias's, is in ``used``."""
    seen = used & STATIC_FORBIDDEN
    return {n for n in names if any(d.rsplit(".", 1)[-1] in seen for d in (n, *ALIASES.get(n, ())))}


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
    kernel before any submission code runs (see ``Item.memory_mb`` and ``unit._cap_memory``).

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
        # a child that may have retries to run is held at its end: they run in it (watch.py)
        held: list[Held] = []
        may_retry = any(it.substitutes for n in plan.cells for it in items[n])
        try:
            _settle_units(
                plan, Path(tmp) / "first", limits, mode, group, held if may_retry else None
            )
            # a wrong earlier task costs only its own points: later items it broke, once more
            if plan.retry():
                plan.courses.update(
                    {
                        u: str(stager().course(_staged_out(plan, its)))
                        for u, (_, its) in plan.units.items()
                        if u not in plan.courses
                    }
                )
                resume = held[0] if held else None  # (still in held: closed there at the end)
                _settle_units(plan, Path(tmp) / "second", limits, mode, group, resume=resume)
        finally:
            for h in held:
                h.close()
    return plan.graded()


def _settle_units(
    plan: Plan,
    tmp: Path,
    limits: Limits,
    mode: str,
    group: cgroup.Group | None,
    keep: list[Held] | None = None,
    resume: Held | None = None,
) -> None:
    """Steps 2-5 until every unit's items are settled (or the student's time is up).

    ``keep``: hold the first child at its end (when it runs every unit: Landlock) and put it
    there; ``resume``: a held child runs the first batch instead of a new one (``job._run``)."""
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
        use, resume = resume, None
        hold = keep is not None and attempt == 0 and not one_unit
        held = None
        try:
            spec, servers, (stage, killed, code), held, out = _run(
                plan, todo, root, limits, mode, group, hold=hold, resume=use
            )
            _read_back(plan, todo, out, servers, protocol.stage_plan(spec), stage)
        finally:
            if held is not None:
                keep.append(held)  # its space is released when it is closed
            if use is not None:
                use.close()
            if held is None:
                space.release(root)
        if not _after(plan, todo, stage, killed, code, limits):
            break
    if resume is not None:  # nothing was left to run in it
        resume.close()


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


def grade_notebook(
    path: str | Path,
    items: list[Item],
    seed: int,
    limits: Limits | None = None,
    isolation_mode: str | None = None,
) -> Graded:
    """Grade ``items`` of one notebook in a child; returns (results, notes)."""
    return grade_submission({"nb": Path(path)}, {"nb": items}, seed, limits, isolation_mode)["nb"]

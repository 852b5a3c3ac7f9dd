"""Grade one student's submission (one or more notebooks) in ONE sandboxed child at a time.

The parent reads each notebook as JSON, makes the cases from the seed, sends the child only
inputs (never references), and judges what comes back. When a cell or an item hangs or kills
the child, that stage gets its status (timeout / crashed / memory limit), and a fresh child runs
the rest without it, so every other item is still graded.
"""

from __future__ import annotations

import ast
import os
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from . import channel, confine, isolation, protocol, space
from . import compare as C
from .child import CONFINE_FAILED
from .feedback import cell_note
from .items import STATIC_FORBIDDEN, Case, Dtype, Item
from .notebook import InvalidNotebook, code_cells
from .sandbox import DISK_FULL, TAMPERED, Limits, run_child, stager

Graded = tuple[list[C.ItemResult], list[str]]  # (results in item order, notes)


def static_forbidden(cells: list[dict], names: set[str]) -> set[str]:
    """Forbidden distinctive names used in the source (attribute, import, name or exact string)."""
    used: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(cell["source"])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(a.name for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
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


def _read_child_result(out: Path, unit: str, item: Item) -> dict | None:
    """The item's result by the protocol, from ITS unit's folder ``out/<unit>``; ``None`` if the
    child wrote none, ``invalid result`` if what it wrote breaks the protocol (forged, truncated,
    oversized, compressed, a link...)."""
    where = protocol.unit_dir(out, unit)
    if where is None:
        return None if not os.path.lexists(out / unit) else {
            "status": C.INVALID_RESULT, "parent_message": "the result breaks the protocol: not a folder"}
    try:
        return protocol.read_result(where, item.id)  # only the protocol's fields; no free text
    except FileNotFoundError:
        return None
    except protocol.Invalid as e:
        return {"status": C.INVALID_RESULT, "parent_message": f"the result breaks the protocol: {e}"[:300]}


def _servers(todo: dict[str, list[Item]], cases: dict[str, list[Case]]) -> dict[str, channel.Server]:
    """One evidence channel per unit that holds items with a ``service`` (see channel.py)."""
    out = {}
    for u, its in todo.items():
        factories = {it.id: (lambda i, it=it: it.service(cases[it.id][i])) for it in its if it.service}
        if factories:
            out[u] = channel.Server(factories, {i: len(cases[i]) for i in factories})
    return out


# Heavy modules that the cells of a notebook may import (by words in their text): the child
# imports them once, before it forks its units, instead of once per unit. Only a miss costs
# (time); the child imports nothing outside child.PRELOADABLE.
_PRELOAD = {"matplotlib.pyplot": ("matplotlib", "plot_attention", "plot_heads"),
            "torch.utils.flop_counter": ("flop_counter",)}


def _preload(cells: list[dict]) -> list[str]:
    """The modules of ``_PRELOAD`` that these cells will import."""
    text = "\n".join(c["source"] for c in cells)
    return [mod for mod, words in _PRELOAD.items() if any(w in text for w in words)]


def _why(killed: str | None, code: int | None, limits: Limits) -> tuple[str, str]:
    if killed == DISK_FULL:
        return C.DISK, (f"filled its writable space (temp: {limits.disk_mb} MiB, {limits.disk_files} "
                        f"files; results: {limits.result_mb} MiB)")
    if killed == TAMPERED:
        return C.INVALID_RESULT, "the submission wrote the grader's progress file (stages out of order)"
    if code is not None and code > 128:  # bubblewrap reports a signal as 128 + its number
        code = -(code - 128)
    if killed or code == -signal.SIGXCPU:
        return C.TIMEOUT, ("took too long" if killed else "used too much CPU time")
    if code == -signal.SIGKILL:
        return C.CRASHED, "the process was killed (SIGKILL: out of memory?)"
    if code == -signal.SIGXFSZ:
        return C.CRASHED, "wrote a file larger than the limit"
    if code == CONFINE_FAILED:
        return C.CRASHED, "the sandbox could not confine this notebook's code (Landlock)"
    if code is not None and code < 0:
        return C.CRASHED, f"the process died of signal {-code}"
    return C.CRASHED, f"the process exited here (exit code {code}: os._exit, or a crash)"


def _units(cells: dict[str, list[dict]], items: dict[str, list[Item]]) -> dict[str, tuple[str, list[Item]]]:
    """Units: the items of a notebook that forbid the same names, ``{"<stem>~<k>": (stem, items)}``.
    Each unit runs the notebook's cells in its own process with its own staged package (see
    child.py), so every item is graded with exactly its own forbidden functions absent."""
    units: dict[str, tuple[str, list[Item]]] = {}
    for name in cells:
        groups: dict[frozenset[str], list[Item]] = {}
        for it in items[name]:
            groups.setdefault(frozenset(it.forbidden), []).append(it)
        for g, its in enumerate(groups.values()):
            units[f"{name}~{g}"] = (name, its)
    return units


def grade_submission(notebooks: dict[str, Path], items: dict[str, list[Item]], seed: int,
                     limits: Limits | None = None, isolation_mode: str | None = None
                     ) -> dict[str, Graded]:
    """Grade several notebooks of one student: ``{name: path}``, ``{name: items}`` -> ``{name: graded}``.

    A unit holding an item with a ``memory_mb`` bound gets its address space capped by the
    kernel before any submission code runs (see ``Item.memory_mb`` and ``child._cap_memory``).

    ``isolation_mode``: ``"bwrap"``, ``"user"`` or ``"none"`` (default: the strongest available,
    or ``MHA_GRADER_ISOLATION``; "none" if nothing is, since this is also the self-check path).
    """
    limits = limits or Limits()
    mode = isolation_mode or isolation.choose(allow_none=True)
    notes: dict[str, list[str]] = {n: [] for n in notebooks}
    cells: dict[str, list[dict]] = {}
    raw: dict[str, dict] = {}
    for name, path in notebooks.items():
        try:
            cells[name] = code_cells(path)
        except InvalidNotebook as e:
            notes[name].append(str(e))
            for it in items[name]:
                raw[it.id] = {"status": C.INVALID_NOTEBOOK, "parent_message": str(e)}
    cases = {it.id: it.cases(seed) for name in notebooks for it in items[name]}
    # cell index -> its number of lines: a line the child reports must be one of them
    lines = {name: {c["index"]: c["source"].count("\n") + 1 for c in cs} for name, cs in cells.items()}
    banned = {name: static_forbidden(cells[name], {f for it in items[name] for f in it.forbidden})
              for name in cells}
    skip: set[tuple[str, int]] = set()
    # One wall deadline per student (restarts included): sleeping cannot stretch it.
    deadline = time.monotonic() + min(limits.student_timeout,
                                      limits.notebook_timeout * max(1, len(cells)))
    units = _units(cells, items)
    courses = {u: str(stager().course({f for it in its for f in it.forbidden}))
               for u, (_, its) in units.items()}
    dirs = {u: f"u{k}" for k, u in enumerate(units)}  # each unit's own results folder
    per_unit = confine.unit_mode(mode)
    with tempfile.TemporaryDirectory(prefix=space.run_prefix()) as tmp:
        os.chmod(tmp, 0o711)  # mode "user": the child's uid may pass through to its own run only
        for attempt in range(sum(len(cells[n]) + len(its) + 1 for n, its in units.values()) + 1):
            todo = {u: [it for it in its if it.id not in raw] for u, (_, its) in units.items()}
            todo = {u: its for u, its in todo.items() if its}
            if per_unit == "sandbox":  # no Landlock here: one sandbox per unit
                todo = dict(list(todo.items())[:1])
            if not todo:
                break
            if time.monotonic() > deadline:
                for its in todo.values():
                    for it in its:
                        raw[it.id] = {"status": C.TIMEOUT, "parent_message": "the submission ran out of time"}
                break
            arrays: dict[str, np.ndarray] = {}
            servers = _servers(todo, cases)  # the parent's side of the evidence channels
            socks = {u: srv.start() for u, srv in servers.items()}
            spec = {"needs_torch": any(it.framework == "torch" or any(
                                           not f.startswith("mha_course.") for f in it.forbidden)
                                       for its in todo.values() for it in its),
                    "preload": _preload([c for u in todo for c in cells[units[u][0]]]),
                    "sys_path": isolation.site_packages(), "item_cpu": limits.item_cpu,
                    "confine": per_unit == "landlock",
                    "read_only": sorted({courses[n] for n in todo}),
                    "notebooks": [{"name": u, "dir": dirs[u], "course": courses[u],
                                   "channel_fd": socks[u].fileno() if u in socks else None,
                                   "cells": [c for c in cells[units[u][0]] if (units[u][0], c["index"]) not in skip],
                                   "items": [{**it.child_spec(), "cases": encode_cases(it, cases[it.id], arrays),
                                              "static_forbidden": sorted(banned[units[u][0]] & set(it.forbidden))}
                                             for it in its]}
                                  for u, its in todo.items()]}
            out = Path(tmp) / f"run{attempt}" / "out"
            try:
                stage, killed, code = run_child(out.parent, spec, arrays, limits, deadline, mode,
                                                pass_fds=[sk.fileno() for sk in socks.values()])
            except BaseException:
                space.release(out.parent)
                raise
            finally:
                for sk in socks.values():
                    sk.close()
                for srv in servers.values():
                    srv.stop()
            trusted = protocol.finished_items(protocol.stage_plan(spec), stage)
            for u, its in todo.items():
                n = units[u][0]
                for it in its:
                    res = _read_child_result(out, dirs[u], it) if it.id in trusted else None
                    if res is not None and it.service is not None:
                        res = servers[u].finish(it.id, res)  # judged on the parent's evidence
                    if res is not None:
                        raw[it.id] = res
                where = protocol.unit_dir(out, dirs[u])
                for e in protocol.read_cells(where) if where is not None else []:
                    note = cell_note(e, lines[n])
                    if note and note not in notes[n]:
                        notes[n].append(note)
            space.release(out.parent)
            if killed == DISK_FULL:
                for u in todo:
                    note = f"{_why(killed, code, limits)[1]}: the write that did not fit failed"
                    if note not in notes[units[u][0]]:
                        notes[units[u][0]].append(note)
            if stage == "done":  # all of todo ran; one sandbox per unit: on to the next unit
                lost = ({"status": C.CRASHED, "parent_message": "no result"} if killed is None else
                        dict(zip(("status", "parent_message"), _why(killed, code, limits))))
                for its in todo.values():
                    for it in its:
                        raw.setdefault(it.id, lost)
                continue
            status, why = _why(killed, code, limits)
            cell, item = protocol.parse_cell_stage(stage), protocol.parse_item_stage(stage)
            if killed == TAMPERED:  # learner code writes the progress: no stage can be trusted
                for its in todo.values():
                    for it in its:
                        raw.setdefault(it.id, {"status": status, "parent_message": why})
                break
            if cell is not None and cell[0] in todo and (units[cell[0]][0], cell[1]) not in skip:
                nb = units[cell[0]][0]
                skip.add((nb, cell[1]))
                notes[nb].append(f"cell {cell[1]}: {status} ({why}); skipped, grading went on without it")
            elif item is not None and item in cases and item not in raw:
                raw[item] = {"status": status, "parent_message": why}
            else:  # died before or outside any stage: nothing more can be learned
                for its in todo.values():
                    for it in its:
                        raw.setdefault(it.id, {"status": status, "parent_message": f"{why} before grading"})
                break
    graded = {}
    for name in notebooks:
        results = [C.judge(it, cases[it.id], raw.get(it.id, {"status": C.CRASHED, "parent_message": "no result"}),
                           lines.get(name))
                   for it in items[name]]
        graded[name] = (results, notes[name])
    return graded


def grade_notebook(path: str | Path, items: list[Item], seed: int, limits: Limits | None = None,
                   isolation_mode: str | None = None) -> Graded:
    """Grade ``items`` of one notebook in a child; returns (results, notes)."""
    return grade_submission({"nb": Path(path)}, {"nb": items}, seed, limits, isolation_mode)["nb"]

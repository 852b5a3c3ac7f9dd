"""Step 2 of grading a submission: one child's job, and the run (``_run``).

The job (``job.json``, built here from the plan) holds per unit the cells to run, the items to
call with their cases encoded as argument specs (``encode_cases``: arrays go into a non-pickle
``.npz``, never a reference), the staged course to import and the heavy modules its cells will
import (``_preload``). Items with a ``service`` get an evidence channel whose other end the
parent serves while the child runs (``_servers``, ``channel.py``); the child itself is started
and stopped by ``sandbox/launch.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mha_grader.items import Case, Dtype, Item
from mha_grader.plan import Plan
from mha_grader.sandbox import cgroup, channel, confine, isolation
from mha_grader.sandbox.launch import Limits, run_child_held
from mha_grader.sandbox.watch import Held


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


def _given(arrays: dict[str, np.ndarray], held: dict[str, np.ndarray]) -> bool:
    """Were all of ``arrays`` given to the held child already (same keys, same values)?"""
    return all(
        k in held and (held[k] is v or np.array_equal(held[k], v, equal_nan=True))
        for k, v in arrays.items()
    )


def _run(
    plan: Plan,
    todo: dict[str, list[Item]],
    root: Path,
    limits: Limits,
    mode: str,
    group: cgroup.Group | None = None,
    hold: bool = False,
    resume: Held | None = None,
):
    """Step 2: one child on ``todo``; returns (its job spec, the evidence servers, its outcome,
    the child if it is held at its end, the folder of its results).

    ``hold``: a child that reaches ``done`` is left waiting for a next job (``watch.Held``);
    ``resume``: such a child runs ``todo`` instead of a new one, when it can (no evidence
    channel, whose socket it would need from the start; inputs it was given then), its courses
    linked into its ``late/`` folder."""
    arrays: dict[str, np.ndarray] = {}
    if resume is not None and any(it.service for its in todo.values() for it in its):
        resume.close()
        resume = None
    servers = _servers(todo, plan.cases)  # the parent's side of the evidence channels
    socks = {u: srv.start() for u, srv in servers.items()}
    nb_of = {u: plan.units[u][0] for u in todo}
    spec = {
        # a NumPy item's torch names are wired if learner code imports torch (tripwires.py)
        "needs_torch": any(it.framework == "torch" for its in todo.values() for it in its),
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
    if resume is not None and _given(arrays, resume.inputs):
        linked = {
            **spec,
            "notebooks": [
                {**nb, "course": resume.link_course(nb["course"], k)}
                for k, nb in enumerate(spec["notebooks"])
            ],
        }
        outcome = resume.resume(linked)
        if outcome is not None:
            return linked, servers, outcome, None, resume.root / "out"
    if resume is not None:  # (a child that could not take the job: a fresh one runs it)
        resume.close()
    held = None
    try:
        outcome, held = run_child_held(
            root,
            spec,
            arrays,
            limits,
            plan.deadline,
            mode,
            pass_fds=[sk.fileno() for sk in socks.values()],
            group=group,
            hold=hold,
        )
        if held is not None:
            held.inputs = arrays  # what its zygote holds: a next job may only use these
    finally:
        try:
            for sk in socks.values():
                sk.close()
            for srv in servers.values():
                srv.stop()
        except BaseException:
            if held is not None:  # never returned to the caller: not left waiting
                held.close()
            raise
    return spec, servers, outcome, held, root / "out"

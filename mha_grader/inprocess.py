"""Learners' quick check in their own kernel: same cases, same comparison, no sandbox.

Uses the child's calling code (``child._run_item``) on the kernel's namespace, so feedback
matches real grading; only the isolation differs (your code runs in your own process).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from mha_grader import substitute
from mha_grader.causes import namespace_graph
from mha_grader.compare import ItemResult, judge
from mha_grader.items import Item
from mha_grader.runner import encode_cases
from mha_grader.sandbox import channel, child


def grade_namespace(
    namespace: dict, items: list[Item], seed: int, public: bool = True
) -> list[ItemResult]:
    """Grade the functions defined in ``namespace`` (e.g. a notebook's globals). ``public``: the
    seed's inputs may be shown in feedback (False for an instructor's hidden seed). A later item
    that an earlier item's failure may have caused is graded again with the course's own earlier
    function where its chapter allows (``substitute.py``), as grading does."""
    wires = child.Tripwires()
    try:
        for name in sorted({n for it in items for n in it.forbidden}):
            wires.install(name)
        results = {it.id: _grade_one(it, namespace, seed, wires, public, {}) for it in items}
        swaps = substitute.retries(items, results, namespace_graph(namespace))
        for it in items:
            if it.id in swaps:
                again = _grade_one(it, namespace, seed, wires, public, swaps[it.id])
                results[it.id] = substitute.combine(it, results[it.id], again, swaps[it.id], items)
    finally:
        wires.uninstall()  # the learner's kernel gets its torch back untouched
    return [results[it.id] for it in items]


def _grade_one(
    it: Item, namespace: dict, seed: int, wires: child.Tripwires, public: bool, swaps: dict
) -> ItemResult:
    cases = it.cases(seed)
    arrays: dict[str, np.ndarray] = {}
    spec = {**it.child_spec(), "cases": encode_cases(it, cases, arrays), "substitutes": swaps}
    # An item with a service gets it from a thread of THIS process (not isolated: your
    # code could reach it; grading serves it from outside the sandbox, channel.py).
    served = (
        channel.in_process(
            {it.id: lambda i, it=it, cases=cases: it.service(cases[i])}, {it.id: len(cases)}
        )
        if it.service
        else contextlib.nullcontext()
    )
    with served as server:
        status, saved = child._run_item(spec, namespace, arrays, wires, np, torch)
    if status.get("status") == "ok":
        status["outputs"] = [
            [saved[f"c{i}_o{j}"] for j in range(n)] for i, n in enumerate(status["n_outputs"])
        ]
    if server is not None:
        status = server.finish(it.id, status)
    r = judge(it, cases, status, public=public)
    if it.memory_mb and r.passed:  # the kernel bound needs a child of its own
        r.message += (
            f" (its {it.memory_mb} MiB memory bound is not enforced in your kernel: "
            "`mha-course check NOTEBOOK` enforces it, as grading does)"
        )
    return r

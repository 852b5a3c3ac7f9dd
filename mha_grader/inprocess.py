"""Learners' quick check in their own kernel: same cases, same comparison, no sandbox.

Uses the child's calling code (``child._run_item``) on the kernel's namespace, so feedback
matches real grading; only the isolation differs (your code runs in your own process).
"""

from __future__ import annotations

import numpy as np
import torch

from . import child
from .compare import ItemResult, judge
from .items import Item
from .runner import encode_cases


def grade_namespace(namespace: dict, items: list[Item], seed: int) -> list[ItemResult]:
    """Grade the functions defined in ``namespace`` (e.g. a notebook's globals)."""
    wires = child.Tripwires()
    results = []
    try:
        for name in sorted({n for it in items for n in it.forbidden}):
            wires.install(name)
        for it in items:
            cases = it.cases(seed)
            arrays: dict[str, np.ndarray] = {}
            spec = {**it.child_spec(), "cases": encode_cases(it, cases, arrays)}
            status, saved = child._run_item(spec, namespace, arrays, wires, np, torch)
            if status.get("status") == "ok":
                status["outputs"] = [[saved[f"c{i}_o{j}"] for j in range(n)]
                                     for i, n in enumerate(status["n_outputs"])]
            results.append(judge(it, cases, status))
    finally:
        wires.uninstall()  # the learner's kernel gets its torch back untouched
    return results

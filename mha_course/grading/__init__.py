"""The course's graded exercises: its items (``chapters/chNN.py``), mistakes and ``check``.

The grading ENGINE (sandbox, protocol, runner, comparison, reports) is the top-level package
``mha_grader``; this package holds the course's policy and the learner's entry point:

- ``check("ex02")`` from a notebook cell: grades the functions defined in YOUR kernel, in-process
  (not isolated: your code runs in your own kernel, and says so).
- ``check("exercises/ex02_scaled_dot_product_attention.ipynb")``: grades the saved notebook in
  a child process, like the instructor's grader (``mha-course check`` does this).
"""

from __future__ import annotations

import os
from pathlib import Path

from mha_grader.causes import explain, namespace_graph
from mha_grader.compare import ItemResult
from mha_grader.items import Case, DriverItem, Dtype, Item, Mistake, PredictionItem, ServiceItem
from mha_grader.keys import PublicSeed
from mha_grader.registry import all_items, items_for, notebooks, resolve
from mha_grader.report import print_results
from mha_grader.runner import grade_notebook, grade_submission
from mha_grader.sandbox.launch import Limits
from mha_grader.substitute import alone

__all__ = [
    "Case",
    "DriverItem",
    "PredictionItem",
    "ServiceItem",
    "Dtype",
    "Item",
    "ItemResult",
    "Limits",
    "Mistake",
    "all_items",
    "check",
    "grade_notebook",
    "grade_submission",
    "items_for",
    "notebooks",
    "resolve",
]


def check(
    name: str | os.PathLike, namespace: dict | None = None, seed: int = 12345, quiet: bool = False
) -> list[ItemResult]:
    """Check an exercise: prints each item's verdict, points and feedback; returns the results.

    ``name`` ending in ``.ipynb`` (an existing file) -> the saved notebook, in a child process.
    Otherwise (``"ex02"``) -> the functions in ``namespace`` (default: the notebook's globals),
    in this process — convenient, but your code runs here, unlike in real grading.
    """
    if os.environ.get("MHA_GRADING_CHILD"):
        return []  # inside the grader's child: grading happens outside
    path = Path(os.fspath(name))
    items = items_for(name)
    if path.suffix == ".ipynb" and path.exists():
        results, notes = grade_notebook(path, items, seed)
    else:
        from mha_grader.inprocess import grade_namespace

        if namespace is None:
            import __main__

            namespace = vars(__main__)
        graded = grade_namespace(namespace, items, seed)
        results, notes = explain(
            graded, [], items, graph=namespace_graph(namespace), alone=alone(graded)
        )
    from mha_course.grading.hints import hint_notes

    notes = [*notes, *hint_notes(results)]
    if not quiet:
        where = "" if path.suffix == ".ipynb" else ", in your kernel: not isolated"
        print_results(
            results, notes, title=f"{resolve(name)} ({PublicSeed(seed).describe()}{where})"
        )
    return results

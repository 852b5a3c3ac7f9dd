"""Steps 3 and 4 of grading a submission: read back what the child wrote and judge it at once.

After the child is gone, each item the harness finished before the stage where it stopped is read
from ITS unit's folder by the protocol (``protocol.py``: nothing trusted, within the student's
byte budget), judged on the parent's evidence where it has a service, and settled in the plan
(only the verdict is kept); the cells' errors become notes.
"""

from __future__ import annotations

import os
from pathlib import Path

from mha_grader import compare as C
from mha_grader.feedback import cell_note
from mha_grader.items import Item
from mha_grader.plan import Plan
from mha_grader.sandbox import protocol


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

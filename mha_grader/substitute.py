"""A wrong earlier task costs only its own points (issue #31 item 5).

A later item whose function calls an earlier item's function (ex02's ``attention`` calls the
learner's ``scaled_scores``) fails whenever that one does. When the earlier item failed, the
runner grades the later item AGAIN, in a unit of its own, with the learner's earlier function
replaced by the course's own, where the chapter allows it (``Item.substitutes``):

- the second verdict counts: passed, the item keeps its points (its own work is right); failed,
  it names the item's own mistake (a second mistake behind a cascade is named, never hidden);
- the replacements live in the sandbox (the course's ``grading/child/``), and the engine stubs
  every function of their modules out of every unit (source level, like a forbidden name), but
  the ones the retried item may use, in its second run: no learner code can call one to pass the
  earlier task, and a wrong later function is still wrong with them (no mark is gained);
- where an earlier failure may not be replaced (the item declares no substitute for it), the
  feedback says which failure the item inherits (``causes.py``) instead of a mistake of its own.

Everything here runs in the parent; the child only sees ``{function: dotted path}`` per item.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from mha_grader import compare as C
from mha_grader.causes import reached
from mha_grader.items import Item

SUBSTITUTED = "graded with the course's {names} in place of yours: {tasks} fails on its own"
# Verdicts on what the learner's function did: graded again. Not a missing later function, and
# never what the parent decided (timeout, crash, a result that broke the protocol): that stands.
_RETRY = frozenset(
    {
        C.WRONG_VALUES,
        C.WRONG_SHAPE,
        C.WRONG_DTYPE,
        C.WRONG_TYPE,
        C.NON_FINITE,
        C.NOT_IMPLEMENTED,
        C.ERROR,
        C.FORBIDDEN,
        C.MEMORY,
    }
)


def _task(item: Item) -> str:
    return item.label or f"item {item.id}"


def stubbed(items: Iterable[Item]) -> frozenset[str]:
    """Every function of every module that holds a substitute declared by ``items`` or by any
    item of the course (dotted names): what each unit's staged course lacks, but for the retried
    item's own substitutes. The whole course's, because a substitute may answer an item of an
    exercise that declares none from its module: ex19's ``merge_safe`` is ex17's
    ``merge_partials``, and ex17 graded alone must not find it."""
    from mha_grader.registry import all_items
    from mha_grader.stage import locate
    from mha_grader.syntax import parse_file  # the course's source, parsed once

    out: set[str] = set()
    for path in sorted({p for it in (*items, *all_items()) for _, p in it.substitutes}):
        file, _ = locate(path)
        mod = path.rpartition(".")[0]
        tree = parse_file(file)
        out |= {
            f"{mod}.{n.name}"
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
    return frozenset(out)


def retries(
    items: Sequence[Item],
    verdicts: Mapping[str, C.ItemResult],
    graph: Mapping[str, set[str]] | None,
) -> dict[str, dict[str, str]]:
    """Item id -> ``{function: substitute}`` for each failed item of one notebook whose failing
    earlier functions (derived from the learner's code, else ``Item.uses``) may ALL be replaced."""
    by_fn = {it.function: it for it in items}
    out = {}
    for it in items:
        r = verdicts.get(it.id)
        if r is None or r.status not in _RETRY or not it.substitutes:
            continue
        uses = reached(graph, it.function, by_fn) if graph and it.function in graph else it.uses
        failing = [
            f
            for f in uses
            if f in by_fn and by_fn[f].id != it.id and not verdicts[by_fn[f].id].passed
        ]
        allowed = dict(it.substitutes)
        if failing and all(f in allowed for f in failing):
            out[it.id] = {f: allowed[f] for f in sorted(failing)}
    return out


def alone(results: Iterable[C.ItemResult]) -> set[str]:
    """The ids of the results that ``combine`` made from a second run (their verdict is their
    own: ``causes.explain`` adds no inherited cause to them)."""
    prefix = SUBSTITUTED.split("{", 1)[0]
    return {r.id for r in results if r.message.startswith(prefix)}


def combine(
    item: Item, first: C.ItemResult, second: C.ItemResult, swaps: Mapping[str, str], items
) -> C.ItemResult:
    """The item's verdict from its second run (its own work), saying what was replaced. A second
    run that ran out of time says nothing of the item: the first verdict stands."""
    if second.status == C.TIMEOUT:
        return first
    deps = [it for it in items if it.function in swaps]
    note = SUBSTITUTED.format(
        names=", ".join(f"`{f}`" for f in swaps),
        tasks=", ".join(f"{_task(d)} ({d.id})" for d in deps),
    )
    if second.passed:
        return replace(second, message=note)
    return replace(second, message=f"{note}; this item's own mistake: {second.message}"[:600])

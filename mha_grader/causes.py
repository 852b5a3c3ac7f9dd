"""Root causes first: when one error causes others, feedback names the first one.

Two chains a learner meets (issue 23, "Feedback when one error causes others"):

- A cell that does not compile (``SyntaxError``) or stops part-way defines nothing after that
  point, so its functions are "missing". For a saved notebook the limited scanner
  (``scan.py``) compiles each cell (never runs it) — the grading process parses no untrusted
  text itself — and the parent reports the cell, the line and the parser's message; an item whose function is
  defined in such a cell is told so instead of "was it renamed or deleted?".
- An item whose function calls an earlier item's function (ex01's ``attend`` calls the
  learner's ``softmax``) fails whenever that one does. Which functions an item reaches is
  DERIVED from the learner's own code (the top-level ``def``s its function's body names, and
  theirs in turn); ``Item.uses`` (declared by the chapter) is the fallback when the learner's
  code cannot be read. A failing item that reaches a failing earlier item says so first.

Everything here runs in the parent, on what the scanner found (or, for the in-kernel check, on
the kernel's cells and the functions' code objects); every word is the parent's, as in ``feedback.py``. The parser's
message is about the learner's own source, so it carries nothing the learner does not have.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mha_grader.compare import MISSING_FUNCTION, ItemResult
from mha_grader.items import Item
from mha_grader.scan import (  # parsing runs in the limited scanner for a saved notebook
    call_graph,
    syntax_errors,
)

# an item failing because an earlier one does, where the course's own may not replace it
INHERITS = (
    "inherits the failure of {task} ({id}: this item calls your `{function}`, which fails its "
    "own item, and the course's own may not replace it here)"
)
_DEF = r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{}\b"  # one line: linear time on any text


def syntax_note(index: int, err: dict[str, Any]) -> str:
    """``cell 4: SyntaxError at line 3 ('(' was never closed): nothing in this cell ran``."""
    at = f" at line {err['line']}" if err.get("line") else ""
    return f"cell {index}: {err['exception']}{at} ({err['message']}): nothing in this cell ran"


def namespace_graph(namespace: Mapping[str, Any]) -> dict[str, set[str]]:
    """The same graph for a live kernel: each function's global names, from its code objects."""

    def names(code: types.CodeType) -> set[str]:
        out = set(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out |= names(c)
        return out

    graph: dict[str, set[str]] = {}
    for key, value in list(namespace.items()):
        code = getattr(value, "__code__", None)
        if isinstance(value, types.FunctionType) and isinstance(code, types.CodeType):
            graph[key] = names(code)
        elif isinstance(value, type) and value.__module__ == "__main__":
            graph[key] = (
                set().union(
                    *(
                        names(f.__code__)
                        for f in vars(value).values()
                        if isinstance(f, types.FunctionType)
                    )
                )
                if vars(value)
                else set()
            )
    return graph


def reached(graph: Mapping[str, set[str]], start: str, also: Iterable[str] = ()) -> set[str]:
    """The defined names (and the names ``also``, e.g. items' functions whose cell does not
    compile) that ``start``'s body reaches, directly or through other defs; not itself."""
    known, seen, todo = set(graph) | set(also), set(), [start]
    while todo:
        for n in graph.get(todo.pop(), ()):
            if n in known and n not in seen and n != start:
                seen.add(n)
                todo.append(n)
    return seen


def _task(item: Item) -> str:
    """How the learner knows the item: the course's label (``task 1``), else its id."""
    return item.label or f"item {item.id}"


def explain(
    results: list[ItemResult],
    notes: list[str],
    items: Sequence[Item],
    *,
    cells: Sequence[dict] | None = None,
    graph: Mapping[str, set[str]] | None = None,
    syntax: Mapping[int, dict[str, Any]] | None = None,
    alone: Iterable[str] = (),
) -> tuple[list[ItemResult], list[str]]:
    """Put root causes first: a cell that does not compile (its note first, with its line and
    message), a function missing because its cell failed, an item failing because an earlier
    item's function it reaches fails. ``cells``: the notebook's graded cells (``code_cells``);
    ``graph``: a call graph when there are no cells (the in-kernel check); ``alone``: the ids of
    items graded again with the course's earlier functions (``substitute.py``): their verdict is
    their own."""
    alone = set(alone)
    cells = list(cells or [])
    bad = syntax_errors(cells) if syntax is None else dict(syntax)  # the scanner's, if given
    broken_notes = [syntax_note(i, e) for i, e in bad.items()]
    # the child's own note on such a cell ("cell 4: raised SyntaxError") says less: replaced
    rest = [n for n in notes if not any(n.startswith(f"cell {i}: ") for i in bad)]
    notes = broken_notes + rest
    if graph is None:
        graph = call_graph(cells)
    by_fn = {it.function: it for it in items}
    status = {r.id: r for r in results}
    out = []
    for it, r in zip(items, results):
        if r.status == MISSING_FUNCTION:
            home = _defining_cell(it.function, cells)
            stopped = next((n for n in rest if n.startswith(f"cell {home}: raised ")), None)
            if home in bad:
                r = replace(
                    r,
                    message=(
                        f"no `{it.function}` defined: it is in cell {home}, which does not "
                        f"compile ({syntax_note(home, bad[home]).split(': ', 1)[1]}): fix that first"
                    ),
                )
            elif stopped:
                r = replace(
                    r,
                    message=(
                        f"no `{it.function}` defined: its cell stopped before defining it "
                        f"({stopped}): fix that first"
                    ),
                )
        elif not r.passed and it.id not in alone:
            uses = reached(graph, it.function, by_fn) if it.function in graph else set(it.uses)
            failing = [
                by_fn[n]
                for n in _in_order(uses, items)
                if n in by_fn and by_fn[n].id != it.id and not status[by_fn[n].id].passed
            ]
            if failing:
                dep = failing[0]
                r = replace(
                    r,
                    message=(
                        f"{INHERITS.format(task=_task(dep), id=dep.id, function=dep.function)}"
                        f": fix that first — {r.message}"
                    )[:600],
                )
        out.append(r)
    return out, notes


def _in_order(names: Iterable[str], items: Sequence[Item]) -> list[str]:
    names = set(names)
    return [it.function for it in items if it.function in names]


def _defining_cell(function: str, cells: Sequence[dict]) -> int | None:
    """The last cell whose text defines ``function`` (the definition that would count)."""
    pattern = re.compile(_DEF.format(re.escape(function)), re.MULTILINE)
    found = [c["index"] for c in cells if pattern.search(c["source"])]
    return found[-1] if found else None

"""Units that run a notebook's decorated DEFINITIONS only, never its cells (``Item.defs_only``).

A kernel graded by running it in an interpreter (Triton's ``TRITON_INTERPRET=1``) is plain Python
there: its body could walk up to the interpreter's frames and write the answer with torch. Such an
item declares ``DefsOnly``: its unit does not run the notebook's cells. This module reads the cells
STATICALLY (``ast``) and keeps, at top level, only

* imports of the declared modules (``import triton.language as tl``, ``from triton import jit``),
* constants: ``NAME = <literal>`` or ``NAME = <dotted>.constexpr(<literal>)`` (``NAME: ann = ...``),
* functions whose only decorator is one of the declared ones (``@triton.jit``), whose defaults and
  annotations are literals or dotted names (so defining them runs nothing of the learner's),

every other line blanked (so line numbers, hence feedback, stay the cell's). A kept statement that
shares a line with a dropped one is dropped too (``X = 1; evil()``). The unit then runs the
declared ``check`` on each item BEFORE anything is launched (the compiler, in its own process: a
kernel it refuses is not graded), and grades the same definitions: the text compiled is the text
that runs (``EXTRACTED`` holds it in the unit's namespace).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Sequence

# The namespace key under which a defs-only unit keeps what it ran: [(file name, source text)].
EXTRACTED = "__defs_only_source__"
# The check's verdicts (``check(...)`` returns None when the item may run, else one of these with
# a cell and line where known): refused by the compiler, compiler unavailable, compile too long.
REFUSED, UNAVAILABLE, TOO_LONG = "refused", "unavailable", "too long"
VERDICTS = (REFUSED, UNAVAILABLE, TOO_LONG)


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _literal(node: ast.AST | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant)


def _inert(node: ast.AST | None) -> bool:
    """Evaluating it runs nothing: absent, a literal, or a dotted name."""
    return node is None or _literal(node) or _dotted(node) is not None


def _allowed(module: str, modules: Sequence[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in modules)


def _aliases(stmt: ast.stmt, modules: Sequence[str]) -> dict[str, str] | None:
    """An allowed import's bindings ``{local name: dotted module path}``, or None to drop it."""
    if isinstance(stmt, ast.Import) and all(_allowed(a.name, modules) for a in stmt.names):
        return {
            a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
            for a in stmt.names
        }
    if (
        isinstance(stmt, ast.ImportFrom)
        and stmt.level == 0
        and stmt.module
        and _allowed(stmt.module, modules)
        and all(a.name != "*" for a in stmt.names)
    ):
        return {a.asname or a.name: f"{stmt.module}.{a.name}" for a in stmt.names}
    return None


def _constant(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assign):
        ok_target = len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    elif isinstance(stmt, ast.AnnAssign):
        ok_target = isinstance(stmt.target, ast.Name) and _dotted(stmt.annotation) is not None
    else:
        return False
    v = stmt.value
    wrapped = (
        isinstance(v, ast.Call)
        and isinstance(v.func, ast.Attribute)
        and v.func.attr == "constexpr"
        and _dotted(v.func) is not None
        and len(v.args) == 1
        and not v.keywords
        and _literal(v.args[0])
    )
    return ok_target and (_literal(v) or wrapped)


def _definition(stmt: ast.stmt, decorators: Sequence[str], names: dict[str, str]) -> bool:
    if not isinstance(stmt, ast.FunctionDef) or len(stmt.decorator_list) != 1:
        return False
    dec = _dotted(stmt.decorator_list[0])
    if dec is None:
        return False
    head, _, rest = dec.partition(".")
    resolved = ".".join(filter(None, [names.get(head, head), rest]))
    a = stmt.args
    every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return (
        resolved in decorators
        and all(_inert(d) for d in [*a.defaults, *a.kw_defaults])
        and all(_inert(p.annotation) for p in every if p is not None)
        and _inert(stmt.returns)
    )


def _span(stmt: ast.stmt) -> range:
    first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
    return range(first, (stmt.end_lineno or stmt.lineno) + 1)


def extract(source: str, decorators: Sequence[str], modules: Sequence[str]) -> str:
    """The cell's text with every line blanked but the kept statements' (see the module doc).

    A cell that does not parse, or keeps nothing, gives an empty text (its lines blank)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    names: dict[str, str] = {}
    keep: list[ast.stmt] = []
    for stmt in tree.body:
        bound = _aliases(stmt, modules)
        if bound is not None:
            names.update(bound)
            keep.append(stmt)
        elif _constant(stmt) or _definition(stmt, decorators, names):
            keep.append(stmt)
    owner: dict[int, int] = {}  # line -> how many top-level statements touch it
    for stmt in tree.body:
        for line in _span(stmt):
            owner[line] = owner.get(line, 0) + 1
    kept_lines = {
        line for stmt in keep if all(owner[n] == 1 for n in _span(stmt)) for line in _span(stmt)
    }
    lines = source.splitlines(keepends=True)
    text = "".join(s if i + 1 in kept_lines else "\n" for i, s in enumerate(lines))
    return text if _same(text, [s for s in keep if set(_span(s)) <= kept_lines]) else ""


def _same(text: str, kept: list[ast.stmt]) -> bool:
    """The blanked text parses to exactly the kept statements (nothing else slipped in)."""
    try:
        again = ast.parse(text).body
    except SyntaxError:
        return False
    return [ast.dump(s) for s in again] == [ast.dump(s) for s in kept]


def extract_cells(cells: list[dict], spec: dict) -> list[dict]:
    """The defs-only program: each cell's extracted text, under the cell's own index."""
    out = []
    for c in cells:
        text = extract(c["source"], spec["decorators"], spec["modules"])
        if text.strip():
            out.append({"index": c["index"], "source": text})
    return out


def check(spec: dict) -> Callable:
    """The declared check, ``"module:function"``."""
    mod, _, name = spec["check"].partition(":")
    return getattr(importlib.import_module(mod), name)


def unwritten(cells: list[tuple[str, str]], function: str) -> bool:
    """The handed-out stub: ``function``'s last definition is only a docstring and ``raise
    NotImplementedError`` — "not implemented", as any unit says of a stub, not "not compiled"
    (the compiler refuses the raise). Read from the extracted text; nothing runs."""
    body = None
    for _, source in cells:
        for stmt in ast.parse(source).body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == function:
                body = stmt.body
    if not body:
        return False
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"

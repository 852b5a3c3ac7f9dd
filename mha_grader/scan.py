"""Read a student's notebooks (JSON) and search their cells' syntax trees in a LIMITED process.

Parsing untrusted text is work the submission chooses: a flat expression of a few MiB costs
``ast.parse`` gigabytes and minutes, deep nesting costs recursion. So the grading process does
neither itself: ``scan`` runs ``python -I -S`` on the staged engine (this module, no NumPy, no
torch) with an address-space limit (``MEMORY_MB``), a CPU limit and a wall limit counted against
the student's deadline, and reads back at most ``MAX_REPLY`` bytes of JSON: per notebook, the
cells to run (``notebook.code_cells``) and the distinctive forbidden names their code uses, or
why the notebook was refused. What comes back is the submission's own text again (cell sources),
as a flat list of strings, which the parent reads in linear time.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import symtable
import sys
import time
from collections.abc import Sequence
from typing import Any

MEMORY_MB = 1024
MAX_REPLY = 64 * 2**20
_BOOT = "import sys; sys.path[:0] = [sys.argv[1]]; import mha_grader.scan as s; s.main()"


class ScanFailed(RuntimeError):
    """The scanner ran out of time or memory (or died): the notebooks are refused."""


class TooComplex(ValueError):
    """A cell the search cannot parse within its limits (it could hide a forbidden name)."""


def used_names(cells: list[dict]) -> set[str]:
    """Attribute, imported, loaded and exact-string names used in the cells' code;
    ``TooComplex`` for a cell too large or too deep to parse here (a ``SyntaxError`` is fine:
    such a cell does not run in the child either)."""
    used: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(cell["source"])
        except (SyntaxError, ValueError):
            continue
        except (RecursionError, MemoryError):
            raise TooComplex(
                f"cell {cell.get('index')} is too large or too deeply nested for the "
                f"grader to check ({MEMORY_MB} MiB)"
            ) from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(a.name for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    return used


_PARSER_MESSAGE = re.compile(r"^[\w\s'\"()\[\]{}:;,.=!?<>+*/%&|^~@#-]{1,120}$")


def syntax_errors(cells: Sequence[dict]) -> dict[int, dict[str, Any]]:
    """Cell index -> ``{"exception", "line", "message"}`` for every cell that does not compile."""
    out = {}
    for cell in cells:
        try:
            compile(cell["source"], f"<cell {cell['index']}>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte in the source
            name = type(e).__name__ if isinstance(e, SyntaxError) else "SyntaxError"
            msg = (
                e.msg
                if isinstance(e, SyntaxError) and isinstance(e.msg, str)
                else "source cannot be compiled"
            )
            line = e.lineno if isinstance(e, SyntaxError) and isinstance(e.lineno, int) else None
            out[cell["index"]] = {
                "exception": name,
                "line": line,
                "message": msg if _PARSER_MESSAGE.match(msg) else "invalid syntax",
            }
        except (RecursionError, MemoryError, OverflowError):
            out[cell["index"]] = {
                "exception": "SyntaxError",
                "line": None,
                "message": "source too deeply nested",
            }
    return out


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _global_reads(table: symtable.SymbolTable) -> set[str]:
    """The global names a scope and the scopes inside it read: not a parameter or a local of
    theirs (ex17's ``dq_tile(..., d_term, ...)`` reads its argument, not task 1's function)."""
    out = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        out |= _global_reads(child)
    return out


def _read_at_def(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    """What the ``def``/``class`` statement itself reads where it stands: decorators, base
    classes, default values (``class SmallGPT(Block)`` reads ``Block``)."""
    if isinstance(node, ast.ClassDef):
        parts = [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    else:
        parts = [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]
    return set().union(*(_loaded_names(p) for p in parts if p is not None))


def call_graph(cells: Sequence[dict]) -> dict[str, set[str]]:
    """Top-level function/class name -> the global names its body reads (all its definitions
    together), by Python's own scoping rules (``symtable``); every loaded name where those
    cannot be computed."""
    graph: dict[str, set[str]] = {}
    for cell in cells:
        try:
            tree = ast.parse(cell["source"])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        defs = [
            n
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
        try:
            scopes = [
                t
                for t in symtable.symtable(cell["source"], "<cell>", "exec").get_children()
                if t.get_type() in ("function", "class")
            ]
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            scopes = []
        rest = iter(scopes)  # a def's table, in order (a lambda or comprehension has one too)
        tables = [next((t for t in rest if t.get_name() == n.name), None) for n in defs]
        for node, table in zip(defs, tables):
            reads = _loaded_names(node) if None in tables else _global_reads(table)
            reads |= _read_at_def(node)
            graph.setdefault(node.name, set()).update(reads)
    return graph


def main() -> None:
    """The scanner: argv[2] = JSON ``{"notebooks": {name: path}, "distinctive": [names]}``."""
    from mha_grader.notebook import InvalidNotebook, code_cells

    job = json.loads(
        sys.argv[2]
    )  # the grader's own argument: read before the limits, no notebook yet
    _limit(int(job["cpu"]))
    distinctive = set(job["distinctive"])
    out = {}
    for name, path in job["notebooks"].items():
        try:
            cells = code_cells(path)
        except InvalidNotebook as e:
            out[name] = {"error": str(e)}
            continue
        try:
            out[name] = {
                "cells": cells,
                "uses": sorted(used_names(cells) & distinctive),
                "syntax": {str(i): e for i, e in syntax_errors(cells).items()},
                "graph": {f: sorted(n) for f, n in call_graph(cells).items()},
            }
        except TooComplex as e:
            out[name] = {"error": f"{os.path.basename(path)}: {e}"}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)


def _limit(cpu: int) -> None:
    """The scanner's first act, before it opens any notebook (so no ``preexec_fn`` is needed,
    and the grader, a big process, starts the scanner by ``vfork`` instead of copying itself)."""
    import resource

    mem = MEMORY_MB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def scan(
    engine: str,
    notebooks: dict[str, str],
    distinctive: set[str],
    wall: float,
    prefix: list[str] = (),
) -> dict:
    """``{name: {"cells": [...], "uses": [...]} | {"error": why}}``; ``ScanFailed`` past ``wall``
    seconds or ``MEMORY_MB`` (the caller refuses the notebooks: "invalid notebook").
    ``prefix``: a command that puts the scanner in the student's cgroup first (``cgroup.argv``)."""
    if os.name != "posix":
        raise RuntimeError(
            "grading a saved notebook needs Linux or macOS (resource limits); on "
            "Windows use WSL, or check('exNN') in the notebook"
        )
    job = json.dumps(
        {"notebooks": notebooks, "distinctive": sorted(distinctive), "cpu": max(1, int(wall) + 1)}
    )
    proc = subprocess.Popen(
        [*prefix, os.path.realpath(sys.executable), "-I", "-S", "-c", _BOOT, engine, job],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        close_fds=True,
        start_new_session=True,
    )
    start, chunks, size = time.monotonic(), [], 0
    os.set_blocking(proc.stdout.fileno(), False)
    try:
        while True:
            try:
                chunk = proc.stdout.read(1 << 20)
            except BlockingIOError:
                chunk = None
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY:
                    raise ScanFailed(f"its cells are more than {MAX_REPLY // 2**20} MiB of code")
            elif chunk == b"" and proc.poll() is not None:
                break
            elif time.monotonic() - start > wall:
                raise ScanFailed(f"reading it took more than {wall:.0f} s")
            else:
                time.sleep(0.005)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    if proc.returncode != 0:
        raise ScanFailed(
            f"reading it needed more than {MEMORY_MB} MiB or its CPU limit (exit {proc.returncode})"
        )
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ScanFailed(f"the scanner's reply is broken ({type(e).__name__})") from None

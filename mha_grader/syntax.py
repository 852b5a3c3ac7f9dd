"""Python syntax trees in the grading process, one thread at a time.

CPython 3.11 keeps ``ast.parse``'s recursion counter in the interpreter, not the thread
(python/cpython#106905): two threads building syntax trees at once (the class grader plans and
reads back several students at a time) can fail with "SystemError: AST constructor recursion depth
mismatch", which would cost an honest student their marks. Every parse the parent does (the
course's own files, the ``.npy`` headers a child writes) goes through this lock; the course's files,
which do not change during a run, are parsed once.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

LOCK = threading.Lock()
_PARSED: dict[tuple[str, int, int], ast.Module] = {}


def parse(text: str) -> ast.Module:
    """``ast.parse`` under the lock."""
    with LOCK:
        return ast.parse(text)


def literal(text: str) -> Any:
    """``ast.literal_eval`` under the lock."""
    with LOCK:
        return ast.literal_eval(text)


def parse_file(file: Path) -> ast.Module:
    """The syntax tree of a source file, parsed once per process while it is unchanged (same
    modification time and size). The tree is shared: callers must not edit it."""
    st = file.stat()
    key = (str(file), st.st_mtime_ns, st.st_size)
    with LOCK:
        if key not in _PARSED:
            _PARSED[key] = ast.parse(file.read_text(encoding="utf-8"))
        return _PARSED[key]

"""Feedback from a fixed vocabulary: the parent writes every word a student reads.

Nothing the child says is echoed. The child reports an exception as its TYPE (the nearest
built-in class in its MRO, so ``class Leak(ValueError)`` is reported as ``ValueError``) and WHERE
in the student's own cells it happened (cell index, line); a wrong return type as a kind from a
fixed list; a forbidden call as the item's forbidden name. The parent checks each field against
what it knows (the built-in exception names, the notebook's cells and their lengths, the item's
forbidden list) and renders the sentence itself. Anything else the child sends is ignored, so a
submission cannot use its feedback.md to carry out text (an environment, a peer's notebook).

Numeric verdicts never print the expected value: they count mismatched elements and give a
coarse relative-error band (see ``compare.py``).
"""

from __future__ import annotations

import builtins
import re
from typing import Any

CELL_FILE = re.compile(r"^<cell (\d{1,6})>$")
BUILTIN_EXCEPTIONS = frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)
# What a wrong return may be described as (the child picks one; built-in type names also pass).
RETURN_KINDS = frozenset(
    {
        "tensor subclass",
        "array subclass",
        "complex tensor",
        "complex array",
        "too many elements",
        "too many outputs",
        "object array",
        "class from the notebook",
        "torch.Tensor",
        "numpy.ndarray",
        "sparse or special tensor",
        "unusual dtype",
    }
)
MAX_LINE = 100_000
# Modules a learner may import that the grading environment may lack: a ModuleNotFoundError names one of
# these (a fixed vocabulary: a module name the child made up is not echoed); any other is "a module".
KNOWN_MODULES = frozenset(
    {
        "einops",
        "opt_einsum",
        "jax",
        "jaxlib",
        "flax",
        "tensorflow",
        "keras",
        "scipy",
        "sklearn",
        "pandas",
        "polars",
        "matplotlib",
        "seaborn",
        "plotly",
        "transformers",
        "tokenizers",
        "datasets",
        "accelerate",
        "xformers",
        "flash_attn",
        "triton",
        "numba",
        "cupy",
        "torchvision",
        "torchaudio",
        "torchtext",
        "sympy",
        "tqdm",
        "IPython",
        "ipywidgets",
        "requests",
        "safetensors",
        "huggingface_hub",
        "timm",
    }
)
# What the sandbox imports from (its read-only view of the grader's runtime), checked in the parent.
PROVIDED = ("numpy", "torch", "triton")


# ---- child side (runs in the sandbox; it only DESCRIBES, it never renders) ----------------------
def exception_report(e: BaseException) -> dict[str, Any]:
    """``{"exception": built-in type name, "cell": i, "line": n}`` for an exception in learner code."""
    name = next(
        (c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"), "BaseException"
    )
    out: dict[str, Any] = {"exception": name}
    tb = e.__traceback__
    while tb is not None:  # the innermost frame that is in one of the student's cells
        m = CELL_FILE.match(tb.tb_frame.f_code.co_filename)
        if m:
            out["cell"], out["line"] = int(m.group(1)), int(tb.tb_lineno)
        tb = tb.tb_next
    if isinstance(e, ModuleNotFoundError) and isinstance(e.name, str) and e.name:
        out["module"] = e.name.split(".")[0][
            :60
        ]  # the parent names it only if it is a known module
    m = (
        CELL_FILE.match(e.filename)
        if isinstance(e, SyntaxError) and isinstance(e.filename, str)
        else None
    )
    if m and isinstance(e.lineno, int):  # a cell that does not compile has no frame of its own
        out["cell"], out["line"] = int(m.group(1)), e.lineno
    return out


def return_kind(x: Any) -> str:
    """A wrong return value's kind, from ``RETURN_KINDS`` or a built-in type's name."""
    t = type(x)
    if t.__module__ == "builtins":
        return t.__name__
    mod = t.__module__.split(".")[0]
    if mod == "torch":
        return "tensor subclass"
    if mod == "numpy":
        return "array subclass"
    return "class from the notebook"


# ---- parent side (validates and renders) --------------------------------------------------------
def exception_name(raw: Any) -> str:
    return raw if isinstance(raw, str) and raw in BUILTIN_EXCEPTIONS else "an exception"


def provided() -> str:
    """What a graded notebook can import: the standard library, the packages of ``PROVIDED`` that the
    grader's runtime has (the sandbox sees that runtime read-only) and the staged course package."""
    import importlib.util

    have = [m for m in PROVIDED if importlib.util.find_spec(m) is not None]
    return f"the Python standard library, {', '.join(have)} and the course's package"


def missing_module(report: dict) -> str:
    """``: `einops` is not installed where notebooks are graded (...)`` for a ModuleNotFoundError."""
    module = report.get("module")
    named = f"`{module}`" if isinstance(module, str) and module in KNOWN_MODULES else "the module"
    return (
        f": {named} is not installed where notebooks are graded, which provides {provided()}; "
        "write that part with these"
    )


def where(report: dict, cell_lines: dict[int, int] | None) -> str:
    """`` at line 3 of cell 7`` when the child's (cell, line) is a real line of a real cell."""
    cell, line = report.get("cell"), report.get("line")
    if type(cell) is not int or type(line) is not int or not 0 < line <= MAX_LINE:
        return ""
    if cell_lines is not None and not 0 < line <= cell_lines.get(cell, 0):
        return ""
    return f" at line {line} of cell {cell}"


# "not compiled" (a defs-only item, sandbox/defs_only.py), by the check's verdict: the grader
# compiled the notebook's kernel definitions alone, in a process no cell ran in.
_NOT_COMPILED = {
    "refused": (
        "does not compile{where}: the grader compiles the kernel's definitions alone (no other "
        "cell runs with them) and the compiler refused it; a kernel's body may use only the "
        "kernel language (no Python or torch calls, no other cell's names but constants)"
    ),
    "unavailable": (
        "was not graded: its compiler is not available on the grading machine (install the "
        "item's extra there); the kernel must compile before its values are graded"
    ),
    "too long": "its compile ran past the grader's time limit, so it was not graded",
}


def render_child(
    status: str,
    report: dict,
    *,
    function: str,
    forbidden: tuple[str, ...] | list[str],
    cell_lines: dict[int, int] | None = None,
) -> str:
    """The message for a child's non-"ok" status, from the fixed vocabulary."""
    if status == "missing function":
        return f"no `{function}` defined (was it renamed or deleted?)"
    if status == "not implemented":
        return "raises NotImplementedError: the task is not done yet"
    if status == "forbidden API":
        names = report.get("forbidden")
        names = [n for n in names if n in forbidden] if isinstance(names, list) else []
        return (
            ("uses " + ", ".join(sorted(set(names)))) if names else "uses an API this item forbids"
        )
    if status == "memory limit":
        return "ran out of memory"
    if status == "not compiled":
        return _NOT_COMPILED.get(report.get("verdict"), _NOT_COMPILED["refused"]).format(
            where=where(report, cell_lines)
        )
    if status == "wrong type":
        kind = report.get("got")
        ok = isinstance(kind, str) and (kind in RETURN_KINDS or kind in _BUILTIN_TYPES)
        return f"expected plain numbers (a tensor or array), got {kind if ok else 'something else'}"
    if status == "error":
        name = exception_name(report.get("exception"))
        if name == "SystemExit":
            return "called sys.exit()" + where(report, cell_lines)
        note = missing_module(report) if name == "ModuleNotFoundError" else ""
        return f"raised {name}{where(report, cell_lines)}{note}"
    return (
        ""  # timeout, crashed, invalid result, ...: the parent's own words are added by the caller
    )


def cell_note(report: Any, cell_lines: dict[int, int] | None = None) -> str | None:
    """``cell 7: raised KeyError at line 2`` for a failing cell, or None if the report is bogus."""
    if not isinstance(report, dict) or type(report.get("index")) is not int:
        return None
    index = report["index"]
    if cell_lines is not None and index not in cell_lines:
        return None
    loc = where({**report, "cell": index}, cell_lines)
    name = exception_name(report.get("exception"))
    note = missing_module(report) if name == "ModuleNotFoundError" else ""
    return f"cell {index}: raised {name}{loc.replace(f' of cell {index}', '')}{note}"


_BUILTIN_TYPES = frozenset(n for n, v in vars(builtins).items() if isinstance(v, type)) | {
    "NoneType"
}


def relative_band(err: float) -> str:
    """A coarse band for a relative error (never the expected value): decades from 0.1 % up."""
    if err != err or err == float("inf"):
        return "not finite"
    for edge, text in (
        (1e-3, "under 0.1 %"),
        (1e-2, "0.1-1 %"),
        (1e-1, "1-10 %"),
        (1.0, "10-100 %"),
    ):
        if err < edge:
            return text
    return "100 % or more"


# ---- an ungraded prediction ("predict, then measure" items, ``Item.prediction``) ---------------
MAX_PREDICTED = 6  # values of the prediction shown; the rest are counted
AGREE = 0.10  # a predicted value "agrees" with the measurement within 10 %


def _number(v: float) -> str:
    """One predicted value in at most 6 characters, written by the parent from a float."""
    if v != v or v in (float("inf"), float("-inf")):
        return "not a number"
    if abs(v) >= 1e4:
        return ">=1e4" if v > 0 else "<=-1e4"
    if 0 < abs(v) < 1e-3:
        return "~0"
    return f"{v:.2g}"


def prediction_note(predicted: list[Any], measured: list[Any] | None = None) -> str:
    """The learner's prediction, in the parent's words: ``predicted`` holds the child's arrays
    (one per case, already checked by the protocol: plain numbers of a known dtype), of which
    only the first case's first values are shown, each rendered from a float (no text of the
    child's reaches the feedback); ``measured`` (the same quantity from the learner's measurement,
    given only when that measurement passed) adds how many predicted values agree with it.
    """
    import numpy as np

    first = np.asarray(predicted[0], dtype=np.float64).reshape(-1) if predicted else np.zeros(0)
    if first.size == 0:
        return "your prediction: none recorded"
    shown = ", ".join(_number(float(v)) for v in first[:MAX_PREDICTED])
    more = f" (+{first.size - MAX_PREDICTED} more)" if first.size > MAX_PREDICTED else ""
    note = f"your prediction (ungraded, case 1 of {len(predicted)}): {shown}{more}"
    if measured is None:
        return note
    agree = total = 0
    for p, m in zip(predicted, measured):
        p, m = (
            np.asarray(p, dtype=np.float64).reshape(-1),
            np.asarray(m, dtype=np.float64).reshape(-1),
        )
        if p.shape != m.shape:
            return f"{note}; it has {p.size} value(s) where the measurement has {m.size}"
        with np.errstate(invalid="ignore", over="ignore"):
            agree += int(np.sum(np.abs(p - m) <= AGREE * np.abs(m)))
        total += m.size
    seen = ", ".join(
        _number(float(v))
        for v in np.asarray(measured[0], dtype=np.float64).reshape(-1)[:MAX_PREDICTED]
    )
    return (
        f"{note}; your measurement: {seen}; {agree} of {total} predicted values within "
        f"{AGREE:.0%} of it"
    )

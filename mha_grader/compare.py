"""The parent's verdict on one item: compare the child's plain arrays with the reference.

The child only sends numbers (and a status when the call failed); the reference and the
mistake variants are computed here, in the grading process.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from .feedback import relative_band, render_child
from .items import Case, Dtype, Item

# Statuses (the ``status`` word of a result; Gradescope gets passed/failed plus this in the output).
PASSED = "passed"
WRONG_VALUES = "wrong values"
WRONG_SHAPE = "wrong shape"
WRONG_DTYPE = "wrong dtype"
WRONG_TYPE = "wrong type"
NON_FINITE = "non-finite"
NOT_IMPLEMENTED = "not implemented"
MISSING_FUNCTION = "missing function"
ERROR = "error"
FORBIDDEN = "forbidden API"
TIMEOUT = "timeout"
MEMORY = "memory limit"
CRASHED = "crashed"
INVALID_NOTEBOOK = "invalid notebook"
MISSING_NOTEBOOK = "missing notebook"
INVALID_RESULT = "invalid result"  # the child's result broke the protocol (mha_grader/protocol.py)
DISK = "disk limit"  # the child filled its sized writable space (mha_grader/space.py)
REJECTED = "rejected"  # the class layout was refused (a symlinked folder, a hard-linked notebook...)
# What a child may report (anything else is "crashed"), and what only the parent decides.
CHILD_STATUSES = frozenset({NOT_IMPLEMENTED, MISSING_FUNCTION, ERROR, FORBIDDEN, MEMORY, WRONG_TYPE})
PARENT_STATUSES = frozenset({TIMEOUT, CRASHED, INVALID_NOTEBOOK, MISSING_NOTEBOOK, INVALID_RESULT, REJECTED,
                             DISK})


@dataclass
class ItemResult:
    """The verdict on one item for one submission."""

    id: str
    function: str
    points: float
    max_points: float
    status: str
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def to_framework(item: Item, case: Case) -> list[Any]:
    """A case's values as the learner's function receives them (tensors or arrays), in order."""
    out = []
    for v in case.values():
        if isinstance(v, np.ndarray):
            out.append(torch.from_numpy(v.copy()) if item.framework == "torch" else v.copy())
        elif isinstance(v, Dtype):
            out.append(getattr(torch, v.name) if item.framework == "torch" else np.dtype(v.name))
        else:
            out.append(v)
    return out


def as_arrays(x: Any) -> list[np.ndarray]:
    """A reference/variant output (tensor, array, number or tuple of them) -> NumPy arrays."""
    xs = x if isinstance(x, (tuple, list)) else (x,)
    out = []
    for t in xs:
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu()
            t = t.float() if t.dtype == torch.bfloat16 else t
            out.append(t.numpy())
        else:
            out.append(np.asarray(t))
    return out


def describe_case(case: Case) -> str:
    """``query (2, 4, 8) float32, attn_mask (4, 6) bool`` — what the failing case looked like."""
    parts = []
    for k, v in case.items():
        if isinstance(v, np.ndarray):
            parts.append(f"{k} {tuple(v.shape)} {v.dtype}")
        elif v is not None:
            parts.append(f"{k}={v.name if isinstance(v, Dtype) else v!r}")
    return ", ".join(parts)


def _tolerances(item: Item, dtype: np.dtype) -> tuple[float, float]:
    if dtype == np.float64:
        return item.rtol * 1e-5, item.atol * 1e-5
    if dtype in (np.float16,) or dtype.itemsize < 4:
        return 1e-2, 1e-2
    return item.rtol, item.atol


def _close(item: Item, got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape:
        return False
    if want.dtype == np.bool_ or got.dtype == np.bool_:
        return bool(np.array_equal(got, want))
    rtol, atol = _tolerances(item, np.dtype(want.dtype))
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(got.astype(np.float64), want.astype(np.float64),
                                rtol=rtol, atol=atol, equal_nan=True))


def _letters(item: Item, shape: tuple[int, ...]) -> str:
    sizes = "(" + ", ".join(str(n) for n in shape) + ")"
    return f"{item.shape} = {sizes}" if item.shape else sizes


def _named_mistake(item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray
                   ) -> tuple[str, str | None] | None:
    """``(message, status override)`` of the first known mistake that explains ``got``."""
    for m in item.mistakes:
        try:
            if m.matches is not None:
                hit = bool(m.matches(got, case))
            else:
                v = as_arrays(m.variant(*to_framework(item, case)))[j]
                hit = _close(item, got, v) and not _close(item, ref, v)
        except Exception:  # a variant that does not apply to this case
            hit = False
        if hit:
            return f"{m.name}: {m.feedback}", m.status
    return None


def compare_output(item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray
                   ) -> tuple[str, str] | None:
    """``None`` if output ``j`` is right, else ``(status, message)``."""
    if got.shape != ref.shape:
        named = _named_mistake(item, case, j, got, ref)
        msg = f"expected shape {_letters(item, ref.shape)}, got {tuple(got.shape)}"
        return WRONG_SHAPE, (f"{msg} — {named[0]}" if named else msg)
    if item.dtype_must_match and got.dtype != ref.dtype:
        return WRONG_DTYPE, (f"expected dtype {ref.dtype} (the input's dtype), got {got.dtype}"
                             + (" — float64 returned for float32 input (a float64 constant, or "
                                "a new tensor made without dtype=...)"
                                if got.dtype == np.float64 and ref.dtype == np.float32 else ""))
    if got.dtype != np.bool_ and ref.dtype != np.bool_:
        bad = ~np.isfinite(got) & np.isfinite(ref)
        if bad.any():
            named = _named_mistake(item, case, j, got, ref)
            if named:
                return named[1] or WRONG_VALUES, named[0]
            return NON_FINITE, f"{int(bad.sum())} NaN/inf value(s) where the expected output is finite"
    if _close(item, got, ref):
        return None
    named = _named_mistake(item, case, j, got, ref)
    if named:
        return named[1] or WRONG_VALUES, named[0]
    return WRONG_VALUES, values_differ(item, got, ref)


def values_differ(item: Item, got: np.ndarray, ref: np.ndarray) -> str:
    """How far off, WITHOUT the expected value: mismatched-element count and a relative-error band.

    (A wrong answer of 0 on a scalar item gets "100 % or more", whatever the right value is.)
    """
    if ref.dtype == np.bool_ or got.dtype == np.bool_:
        return f"{int((got != ref).sum())} of {ref.size} entries differ"
    rtol, atol = _tolerances(item, np.dtype(ref.dtype))
    g, r = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~np.isclose(g, r, rtol=rtol, atol=atol, equal_nan=True)
        finite = np.isfinite(r) & np.isfinite(g)
        num = float(np.linalg.norm(np.where(finite, g - r, 0.0)))
        den = float(np.linalg.norm(np.where(finite, r, 0.0)))
    rel = num / den if den > 0 else float("inf")
    band = "100 % or more" if rel == float("inf") else relative_band(rel)
    what = "the value differs" if ref.ndim == 0 else f"{int(bad.sum())} of {ref.size} values differ"
    return f"{what} (relative error {band}; tolerance rtol={rtol:g}, atol={atol:g})"


# The class grader judges students in several threads. References and mistake variants may
# build torch modules, which draw from torch's global RNG; one lock keeps a seeded reference
# (e.g. ch05's seeded model) from being interleaved with another thread's draws.
_JUDGE_LOCK = threading.Lock()


def judge(item: Item, cases: list[Case], child: dict[str, Any],
          cell_lines: dict[int, int] | None = None) -> ItemResult:
    """Score one item from the child's report ``{"status", ..., "outputs": [[arrays]]}``.

    A non-"ok" report gets its message from the fixed vocabulary (``feedback.render_child``);
    ``parent_message`` is the PARENT's own words (a timeout, a crash) and the only text kept.
    ``cell_lines`` (cell index -> number of lines) lets a reported line be checked.
    """
    with _JUDGE_LOCK:
        return _judge(item, cases, child, cell_lines)


def _judge(item: Item, cases: list[Case], child: dict[str, Any], cell_lines: dict[int, int] | None
           ) -> ItemResult:
    status = child.get("status", CRASHED)
    if status != "ok":
        if status not in CHILD_STATUSES | PARENT_STATUSES:
            status = CRASHED
        msg = render_child(status, child, function=item.function, forbidden=tuple(item.forbidden),
                           cell_lines=cell_lines)
        if status == MEMORY and item.memory_mb:
            msg += (f"; this item may use at most {item.memory_mb} MiB beyond start-up (the kernel "
                    "enforces it): its large case's full (L, S) matrix does not fit, so the method matters")
        own = child.get("parent_message")
        if isinstance(own, str):
            msg = f"{msg}; {own}" if msg else own
        return ItemResult(item.id, item.function, 0.0, item.points, status, msg[:500])
    outputs = child.get("outputs") or []
    for i, case in enumerate(cases):
        refs = as_arrays(item.reference(*to_framework(item, case)))
        got = outputs[i] if i < len(outputs) else []
        where = f" [case {i + 1} of {len(cases)}: {describe_case(case)}]"
        if len(got) != len(refs):
            msg = (f"expected {len(refs)} output(s), got {len(got)}" if len(refs) > 1 or len(got) > 1
                   else "no output")
            return ItemResult(item.id, item.function, 0.0, item.points, WRONG_TYPE, msg + where)
        for j, (g, r) in enumerate(zip(got, refs)):
            verdict = compare_output(item, case, j, g, r)
            if verdict:
                name = f"output {j}: " if len(refs) > 1 else ""
                return ItemResult(item.id, item.function, 0.0, item.points, verdict[0],
                                  name + verdict[1] + where)
    return ItemResult(item.id, item.function, float(item.points), item.points, PASSED,
                      f"all {len(cases)} cases match")

"""The parent's verdict on one item: compare the child's plain arrays with the reference.

The child only sends numbers (and a status when the call failed); the reference and the
mistake variants are computed here, in the grading process.
"""

from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch

from mha_grader.feedback import prediction_note, relative_band, render_child
from mha_grader.items import Case, DriverItem, Dtype, Item, Mistake

# Statuses (the ``status`` word of a result; Gradescope gets passed/failed plus this in the output).
PASSED = "passed"
WRONG_VALUES = "wrong values"
WRONG_SHAPE = "wrong shape"
WRONG_DTYPE = "wrong dtype"
WRONG_TYPE = "wrong type"
NON_FINITE = "non-finite"
NOT_IMPLEMENTED = "not implemented"
NOT_COMPILED = "not compiled"  # a defs-only item's compiler refused it (sandbox/defs_only.py)
MISSING_FUNCTION = "missing function"
ERROR = "error"
FORBIDDEN = "forbidden API"
TIMEOUT = "timeout"
MEMORY = "memory limit"
CRASHED = "crashed"
INVALID_NOTEBOOK = "invalid notebook"
MISSING_NOTEBOOK = "missing notebook"
INVALID_RESULT = (
    "invalid result"  # the child's result broke the protocol (mha_grader/sandbox/protocol.py)
)
DISK = "disk limit"  # the child filled its sized writable space (mha_grader/sandbox/space.py)
REJECTED = (
    "rejected"  # the class layout was refused (a symlinked folder, a hard-linked notebook...)
)
# What a child may report (anything else is "crashed"), and what only the parent decides.
CHILD_STATUSES = frozenset(
    {NOT_IMPLEMENTED, MISSING_FUNCTION, ERROR, FORBIDDEN, MEMORY, WRONG_TYPE, NOT_COMPILED}
)
PARENT_STATUSES = frozenset(
    {TIMEOUT, CRASHED, INVALID_NOTEBOOK, MISSING_NOTEBOOK, INVALID_RESULT, REJECTED, DISK}
)


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


def reference_dtypes(item: Item, seed: int = 0) -> list[np.dtype]:
    """The dtypes of the reference's outputs on the item's first case (what :func:`dtype_rule` states)."""
    cases = item.cases(seed)
    return (
        [a.dtype for a in as_arrays(item.reference(*to_framework(item, cases[0])))] if cases else []
    )


def dtype_rule(item: Item, dtypes: list[np.dtype] | None = None) -> str:
    """The item's dtype rule in words: the same sentence in its test cell and its feedback.

    ``dtypes``: the reference's output dtypes (:func:`reference_dtypes`; the feedback passes the one
    output it judges). An item that must keep its dtype and returns no floats (a bool mask, integer
    positions) is told so, not given the floating rule.
    """
    if item.dtype_must_match and dtypes and not any(np.dtype(d).kind == "f" for d in dtypes):
        names = list(dict.fromkeys(np.dtype(d).name for d in dtypes))
        if names == ["bool"]:
            return "a bool output (True/False), not 0/1 numbers"
        if all(np.dtype(d).kind in "iu" for d in dtypes):
            return (
                f"an integer output ({' or '.join(names)}, as the reference returns), not a float"
            )
        return f"outputs of dtype {', '.join(names)} (as the reference returns them), not floats"
    if item.dtype_must_match:
        return "the output keeps the input's floating dtype (float32 in, float32 out; float64 in, float64 out)"
    if item.rtol == 0 and item.atol < 1:
        return "any number type (int or float): the answer is a count or an index, compared exactly"
    return (
        "any floating dtype (float32 or float64): compared at the precision of the less precise "
        "of yours and the reference's"
    )


def _compare_dtype(item: Item, got: np.ndarray, ref: np.ndarray) -> np.dtype:
    """The dtype whose tolerances apply: the reference's, or (where the item lets the dtype
    differ) a less precise floating dtype returned, as ``torch.testing.assert_close(...,
    check_dtype=False)`` does in the notebooks' self-checks."""
    want = np.dtype(ref.dtype)
    have = np.dtype(got.dtype)
    if (
        not item.dtype_must_match
        and have.kind == "f"
        and want.kind == "f"
        and have.itemsize < want.itemsize
    ):
        return have
    return want


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
    rtol, atol = _tolerances(item, _compare_dtype(item, got, want))
    with np.errstate(invalid="ignore"):
        return bool(
            np.allclose(
                got.astype(np.float64),
                want.astype(np.float64),
                rtol=rtol,
                atol=atol,
                equal_nan=True,
            )
        )


def _letters(item: Item, shape: tuple[int, ...], j: int = 0) -> str:
    """``(B, T, E) = (2, 5, 16)``: output ``j``'s letters (an item with several outputs lists one
    group per output, ``"(B, T, E), (B, H, T, T)"``) and its sizes."""
    sizes = "(" + ", ".join(str(n) for n in shape) + ")"
    groups = re.findall(r"\([^()]*\)", item.shape)
    letters = groups[j] if len(groups) > 1 and j < len(groups) else item.shape
    return f"{letters} = {sizes}" if letters else sizes


def output_label(item: Item, j: int, n: int) -> str:
    """``"output 2 (preemptions): "`` for output ``j`` of ``n``: the name comes from the item's ``shape``
    when it names each output (``"used (steps,), shared (steps,), ..."``), so the feedback of a loop
    returning five arrays says which one is wrong; ``"output 1: "`` when it does not; ``""`` for one output."""
    if n <= 1:
        return ""
    names = re.findall(r"(?<![\w.])([A-Za-z_]\w*) \(", item.shape)
    return f"output {j} ({names[j]}): " if len(names) == n else f"output {j}: "


def mistake_text(m: Mistake) -> str:
    """``name: feedback``, or the feedback alone when it already starts by naming the mistake
    (not "off by one: causal mask off by one: ...")."""
    head = m.feedback.split(":")[0].lower()
    named = re.search(rf"(?<!\w){re.escape(m.name.lower())}(?!\w)", head) is not None
    return m.feedback if named else f"{m.name}: {m.feedback}"


def _named_mistake(
    item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray
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
            return mistake_text(m), m.status
    return None


def compare_output(
    item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray
) -> tuple[str, str] | None:
    """``None`` if output ``j`` is right, else ``(status, message)``."""
    if got.shape != ref.shape:
        named = _named_mistake(item, case, j, got, ref)
        msg = f"expected shape {_letters(item, ref.shape, j)}, got {tuple(got.shape)}"
        return WRONG_SHAPE, (f"{msg} — {named[0]}" if named else msg)
    if item.dtype_must_match and got.dtype != ref.dtype:
        return WRONG_DTYPE, _dtype_message(item, case, j, got, ref)
    if got.dtype != np.bool_ and ref.dtype != np.bool_:
        bad = ~np.isfinite(got) & np.isfinite(ref)
        if bad.any():
            named = _named_mistake(item, case, j, got, ref)
            if named:
                return named[1] or WRONG_VALUES, named[0]
            return (
                NON_FINITE,
                f"{int(bad.sum())} NaN/inf value(s) where the expected output is finite",
            )
    if _close(item, got, ref):
        return None
    named = _named_mistake(item, case, j, got, ref)
    if named:
        return named[1] or WRONG_VALUES, named[0]
    return WRONG_VALUES, values_differ(item, got, ref)


def _dtype_message(item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray) -> str:
    """A wrong dtype, the rule it breaks, and whether the values are right apart from it (a
    dtype message must not hide a real bug)."""
    msg = (
        f"expected dtype {ref.dtype}, got {got.dtype} (dtype rule: {dtype_rule(item, [ref.dtype])})"
    )
    if got.dtype == np.float64 and ref.dtype == np.float32:
        msg += "; float64 returned for float32 input (a float64 constant, or a new tensor made without dtype=...)"
    if got.dtype.kind not in "fiub" or ref.dtype == np.bool_ or got.dtype == np.bool_:
        return msg
    loose = np.dtype(np.float32) if np.float32 in (got.dtype, ref.dtype) else np.dtype(ref.dtype)
    if _close(item, got.astype(loose), ref.astype(loose)):
        return msg + "; the values are right apart from the dtype"
    named = _named_mistake(item, case, j, got.astype(ref.dtype), ref)
    return (
        msg
        + "; the values are wrong too: "
        + (named[0] if named else values_differ(item, got.astype(loose), ref.astype(loose)))
    )


def values_differ(item: Item, got: np.ndarray, ref: np.ndarray) -> str:
    """How far off, WITHOUT the expected value: mismatched-element count and a relative-error band.

    (A wrong answer of 0 on a scalar item gets "100 % or more", whatever the right value is.)
    """
    if ref.dtype == np.bool_ or got.dtype == np.bool_:
        return f"{int((got != ref).sum())} of {ref.size} entries differ"
    rtol, atol = _tolerances(item, _compare_dtype(item, got, ref))
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


def judge(
    item: Item,
    cases: list[Case],
    child: dict[str, Any],
    cell_lines: dict[int, int] | None = None,
    public: bool = False,
) -> ItemResult:
    """Score one item from the child's report ``{"status", ..., "outputs": [[arrays]]}``.

    A non-"ok" report gets its message from the fixed vocabulary (``feedback.render_child``);
    ``parent_message`` is the PARENT's own words (a timeout, a crash) and the only text kept.
    ``cell_lines`` (cell index -> number of lines) lets a reported line be checked.
    ``public``: the cases are the public self-check inputs (an int seed), so an exact answer's
    feedback may show the value returned and the value expected (``exact_answer``).
    """
    with _JUDGE_LOCK:
        result = _judge(item, cases, child, cell_lines)
        if public and result.status == WRONG_VALUES and exact_answer(item):
            verdict, *note = result.message.split(PREDICTION_SEP, 1)  # a prediction stays recorded
            result.message = _values_shown(item, cases, child.get("outputs") or [], verdict)
            result.message += "".join(PREDICTION_SEP + n for n in note)
        return result


def exact_answer(item: Item) -> bool:
    """An index or a count: compared exactly (rtol 0, atol under 1)."""
    return item.rtol == 0 and item.atol < 1


def _show(x: np.ndarray) -> str:
    if x.ndim == 0:
        v = x.item()
        return f"{v:g}" if isinstance(v, float) else str(v)
    return str(x.tolist()) if x.size <= 12 else f"an array of shape {tuple(x.shape)}"


def _values_shown(item: Item, cases: list[Case], outputs: list, message: str) -> str:
    """For an exact answer on PUBLIC inputs: the value returned and the value expected on the
    smallest public case that separates them (fewest input elements, then smallest numbers),
    in place of the relative-error text."""
    found = []
    for i, case in enumerate(cases):
        refs = as_arrays(item.reference(*to_framework(item, case)))
        got = outputs[i] if i < len(outputs) else []
        for j, (g, r) in enumerate(zip(got, refs)):
            if g.shape == r.shape and not _close(item, g, r):
                arrays = [v for v in case.values() if isinstance(v, np.ndarray)]
                numbers = [
                    abs(float(v))
                    for v in case.values()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                ]
                found.append(((sum(a.size for a in arrays), sum(numbers)), i, j, g, r))
                break
    if not found:
        return message
    first = _named_mistake(item, cases[found[0][1]], *found[0][2:])
    if first:  # the mistake named on the first failing case: the smallest case showing THAT one
        found = [f for f in found if _named_mistake(item, cases[f[1]], *f[2:]) == first] or found[
            :1
        ]
    _, i, j, g, r = min(found, key=lambda f: f[0])
    named = _named_mistake(item, cases[i], j, g, r)
    at = ""
    if g.ndim and g.size > 12:
        k = tuple(
            int(n)
            for n in np.argwhere(
                ~np.isclose(g.astype(float), r.astype(float), rtol=0, atol=item.atol)
            )[0]
        )
        at = f" at index {k}"
        g, r = g[k], r[k]
    label = output_label(
        item, j, len(g_all) if (g_all := outputs[i] if i < len(outputs) else []) else 1
    )
    label = "" if label == "output 0: " else label  # an unnamed first output: as before, no label
    return (
        f"{label}returned {_show(np.asarray(g))}, expected {_show(np.asarray(r))}{at} "
        f"on the smallest public case that separates them"
        + (f" — {named[0]}" if named else "")
        + f" [case {i + 1} of {len(cases)}: {describe_case(cases[i])}]"
    )


def _judge(
    item: Item, cases: list[Case], child: dict[str, Any], cell_lines: dict[int, int] | None
) -> ItemResult:
    status = child.get("status", CRASHED)
    if status != "ok":
        if status not in CHILD_STATUSES | PARENT_STATUSES:
            status = CRASHED
        msg = render_child(
            status,
            child,
            function=item.function,
            forbidden=tuple(item.forbidden),
            cell_lines=cell_lines,
        )
        if status == MEMORY and item.memory_mb:
            msg += (
                f"; this item may use at most {item.memory_mb} MiB beyond start-up (the kernel "
                "enforces it): its large case's full (L, S) matrix does not fit, so the method matters"
            )
        own = child.get("parent_message")
        if isinstance(own, str):
            msg = f"{msg}; {own}" if msg else own
        lacking = item.missing()  # an optional extra that is not installed: say how to get it
        if lacking:
            msg = "; ".join(lacking) + (f" ({msg})" if msg else "")
        return ItemResult(item.id, item.function, 0.0, item.points, status, msg[:500])
    outputs = child.get("outputs") or []
    if item.prediction is not None:  # the last output of each case is the ungraded prediction
        return _with_prediction(item, cases, outputs, cell_lines)
    for i, case in enumerate(cases):
        refs = as_arrays(item.reference(*to_framework(item, case)))
        got = outputs[i] if i < len(outputs) else []
        where = f" [case {i + 1} of {len(cases)}: {describe_case(case)}]"
        if len(got) != len(refs):
            msg = (
                f"expected {len(refs)} output(s), got {len(got)}"
                if len(refs) > 1 or len(got) > 1
                else "no output"
            )
            return ItemResult(item.id, item.function, 0.0, item.points, WRONG_TYPE, msg + where)
        for j, (g, r) in enumerate(zip(got, refs)):
            verdict = compare_output(item, case, j, g, r)
            if verdict:
                name = output_label(item, j, len(refs))
                return ItemResult(
                    item.id, item.function, 0.0, item.points, verdict[0], name + verdict[1] + where
                )
    return ItemResult(
        item.id,
        item.function,
        float(item.points),
        item.points,
        PASSED,
        f"all {len(cases)} cases match",
    )


PREDICTION_SEP = (
    "; your prediction"  # how the note starts (feedback.prediction_note), after the verdict
)


def _with_prediction(
    item: Item, cases: list[Case], outputs: list, cell_lines: dict[int, int] | None
) -> ItemResult:
    """Judge the graded outputs without the last one of each case (the prediction), then add the
    prediction to the message, rendered by the parent (``feedback.prediction_note``)."""
    n = len(as_arrays(item.reference(*to_framework(item, cases[0])))) if cases else 0
    if any(len(got) != n + 1 for got in outputs[: len(cases)]) or len(outputs) < len(cases):
        return ItemResult(
            item.id,
            item.function,
            0.0,
            item.points,
            WRONG_TYPE,
            f"expected {n + 1} outputs per case: the {n} measured and your prediction",
        )
    graded = [got[:n] for got in outputs]
    # judged as the driver item it is, without its prediction
    as_driver = DriverItem(**{f.name: getattr(item, f.name) for f in fields(DriverItem)})
    result = _judge(as_driver, cases, {"status": "ok", "outputs": graded}, cell_lines)
    predicted = [got[n] for got in outputs]
    measured = [item.prediction(got) for got in graded] if result.passed else None
    result.message = f"{result.message}; {prediction_note(predicted, measured)}"
    return result

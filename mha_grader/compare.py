"""The parent's verdict on one item: compare the child's plain arrays with the reference.

The child only sends numbers (and a status when the call failed); the reference and the
mistake variants are computed here, in the grading process.

Here: ``judge`` (every case of one item, with a prediction or an exact answer's values where the
item has them). The statuses and ``ItemResult`` are ``verdicts.py``; the tolerances and dtype rule
``tolerances.py``; what is wrong with one output ``diagnosis.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from mha_grader.diagnosis import (  # noqa: F401 - re-exported: compare.py's names before its split
    Trust,
    _named_mistake,
    compare_output,
    explains,
    mistake_text,
    output_label,
    values_differ,
)
from mha_grader.feedback import prediction_note, render_child
from mha_grader.items import Case, DriverItem, Dtype, Item, Mistake
from mha_grader.tolerances import (  # noqa: F401 - re-exported: compare.py's names before its split
    _close,
    as_arrays,
    dtype_rule,
    reference_dtypes,
    to_framework,
)
from mha_grader.verdicts import (  # noqa: F401 - re-exported: compare.py's names before its split
    CHILD_STATUSES,
    CRASHED,
    DISK,
    ERROR,
    FORBIDDEN,
    INVALID_NOTEBOOK,
    INVALID_RESULT,
    MEMORY,
    MISSING_FUNCTION,
    MISSING_NOTEBOOK,
    NON_FINITE,
    NOT_COMPILED,
    NOT_IMPLEMENTED,
    PARENT_STATUSES,
    PASSED,
    REJECTED,
    TIMEOUT,
    WRONG_DTYPE,
    WRONG_SHAPE,
    WRONG_TYPE,
    WRONG_VALUES,
    ItemResult,
)


def describe_case(case: Case) -> str:
    """``query (2, 4, 8) float32, attn_mask (4, 6) bool`` — what the failing case looked like."""
    parts = []
    for k, v in case.items():
        if isinstance(v, np.ndarray):
            parts.append(f"{k} {tuple(v.shape)} {v.dtype}")
        elif v is not None:
            parts.append(f"{k}={v.name if isinstance(v, Dtype) else v!r}")
    return ", ".join(parts)


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
    refs_of: dict[int, list] = {}

    def refs_for(k: int) -> list:
        if k not in refs_of:
            refs_of[k] = as_arrays(item.reference(*to_framework(item, cases[k])))
        return refs_of[k]

    for i, case in enumerate(cases):
        refs = refs_for(i)
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
            verdict = compare_output(
                item, case, j, g, r, trust=_agreed(item, cases, outputs, refs_for, i, j)
            )
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


def _agreed(
    item: Item,
    cases: list[Case],
    outputs: list,
    refs_for: Callable[[int], list],
    i: int,
    j: int,
) -> Trust:
    """Whether a mistake seen on case ``i`` may be named: the other cases whose output ``j`` is
    wrong must not contradict it more often than they agree (a mistake's variant is a model of
    the wrong code, not always its exact output: an inverted mask's NaN rows, for one). The first
    failing case alone can mislead: with P = 2 ranks, (s - r) % P and (r + s) % P agree; with
    P = 3 they do not, and a learner's (s - r) % P was told "wrong direction"."""

    def trust(m: Mistake) -> bool:
        if m.matches is not None:  # a predicate's False can mean "not this kind of case": no vote
            return True
        agree, contradict = 1, 0  # case i agrees: that is why it is asked
        others = [k for k in range(len(cases)) if k != i]
        for n, k in enumerate(others):
            left = len(others) - n  # cases not yet seen, this one included
            if agree >= contradict + left:
                return True  # decided: the rest cannot outvote it (the parent's time)
            got = outputs[k] if k < len(outputs) else []
            if len(got) <= j:
                continue
            g, r = got[j], refs_for(k)[j]
            if g.shape == r.shape and _close(item, g, r):
                continue  # right here: nothing to tell
            seen = explains(item, m, cases[k], j, g, r)
            agree += seen is True
            contradict += seen is False
        return contradict <= agree

    return trust


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

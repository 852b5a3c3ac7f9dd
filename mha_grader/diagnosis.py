"""What is wrong with one output: ``compare_output`` returns ``None`` for a right output, else
its status and the words that say why (a shape, a dtype, NaN/inf, a known mistake of the item's,
how far off without the expected value).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from mha_grader.feedback import relative_band
from mha_grader.items import Case, Item, Mistake
from mha_grader.tolerances import (
    _close,
    _compare_dtype,
    _tolerances,
    as_arrays,
    dtype_rule,
    to_framework,
)
from mha_grader.verdicts import NON_FINITE, WRONG_DTYPE, WRONG_SHAPE, WRONG_VALUES


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


def explains(
    item: Item, m: Mistake, case: Case, j: int, got: np.ndarray, ref: np.ndarray
) -> bool | None:
    """Does mistake ``m`` explain output ``j`` of ``case``? ``None`` where it cannot tell: its
    variant does not apply to the case, or computes the right output there (the case cannot
    separate the mistake from the right answer)."""
    try:
        if m.matches is not None:
            return bool(m.matches(got, case))
        v = as_arrays(m.variant(*to_framework(item, case)))[j]
        if _close(item, ref, v):  # (False for shapes that differ)
            return None
        return _close(item, got, v)
    except Exception:  # a variant that does not apply to this case
        return None


Trust = Callable[[Mistake], bool]


def _named_mistake(
    item: Item,
    case: Case,
    j: int,
    got: np.ndarray,
    ref: np.ndarray,
    trust: Trust | None = None,
) -> tuple[str, str | None] | None:
    """``(message, status override)`` of the first known mistake that explains ``got`` (and
    that ``trust`` accepts: ``_judge`` asks whether the item's other cases agree)."""
    # one bit (a check's verdict): any variant that fails the check would "explain" it; only a
    # mistake's own predicate (``matches``) may name it
    one_bit = got.dtype == np.bool_ and got.size == 1
    for m in item.mistakes:
        if one_bit and m.matches is None:
            continue
        if explains(item, m, case, j, got, ref) and (trust is None or trust(m)):
            return mistake_text(m), m.status
    return None


def compare_output(
    item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray, trust: Trust | None = None
) -> tuple[str, str] | None:
    """``None`` if output ``j`` is right, else ``(status, message)``; a known mistake is named
    only if ``trust`` (when given) accepts it."""
    if got.shape != ref.shape:
        named = _named_mistake(item, case, j, got, ref, trust)
        msg = f"expected shape {_letters(item, ref.shape, j)}, got {tuple(got.shape)}"
        return WRONG_SHAPE, (f"{msg} — {named[0]}" if named else msg)
    if item.dtype_must_match and got.dtype != ref.dtype:
        return WRONG_DTYPE, _dtype_message(item, case, j, got, ref, trust)
    if got.dtype != np.bool_ and ref.dtype != np.bool_:
        bad = ~np.isfinite(got) & np.isfinite(ref)
        if bad.any():
            named = _named_mistake(item, case, j, got, ref, trust)
            if named:
                return named[1] or WRONG_VALUES, named[0]
            return (
                NON_FINITE,
                f"{int(bad.sum())} NaN/inf value(s) where the expected output is finite",
            )
    if _close(item, got, ref):
        return None
    named = _named_mistake(item, case, j, got, ref, trust)
    if named:
        return named[1] or WRONG_VALUES, named[0]
    return WRONG_VALUES, values_differ(item, got, ref)


def _dtype_message(
    item: Item, case: Case, j: int, got: np.ndarray, ref: np.ndarray, trust: Trust | None = None
) -> str:
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
    named = _named_mistake(item, case, j, got.astype(ref.dtype), ref, trust)
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

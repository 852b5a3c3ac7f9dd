"""How a returned array is held against the reference's: a case's values as the learner's
function receives them (``to_framework``), outputs as NumPy arrays (``as_arrays``), the dtype rule
a learner is told (``dtype_rule``) and the tolerances that follow from it (``_close``).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from mha_grader.items import Case, Dtype, Item

# torch is imported where a torch item needs it, not with this module: the commands that only
# read (``mha-course hint``, ``report``) then start in a tenth of the time.


def to_framework(item: Item, case: Case) -> list[Any]:
    """A case's values as the learner's function receives them (tensors or arrays), in order."""
    if item.framework == "torch":
        import torch
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
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    out = []
    for t in xs:
        if torch is not None and isinstance(t, torch.Tensor):
            t = t.detach().cpu()
            t = t.float() if t.dtype == torch.bfloat16 else t
            out.append(t.numpy())
        else:
            out.append(np.asarray(t))
    return out


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

"""The grading policy a gradebook was made under, as one fingerprint (``grading.json``'s
``policy``), so that folders graded by different versions of the items are not merged.

Item ids alone do not say it: a new version may keep every id and grade differently (a case
added so a common bug no longer passes, a forbidden list grown, points or tolerances changed).
A student regraded under it and merged into a gradebook made under the old one would be judged
on stricter cases than the classmates. The fingerprint covers, per graded item: its id, points,
tolerances, forbidden names, and its cases for one fixed public seed (arrays by dtype, shape and
bytes; everything else by ``repr``). Case generators draw per-student inputs from the same code,
so a change to them shows in the fixed seed's cases.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from mha_grader.items import Item

SEED = 0  # the fixed public seed the cases are fingerprinted at


def _feed(h: Any, value: Any) -> None:
    """Hash ``value`` canonically: arrays by dtype, shape and bytes, containers by their items."""
    if isinstance(value, np.ndarray):
        h.update(f"array {value.dtype.str} {value.shape}|".encode())
        if value.dtype.kind == "O":  # objects have no stable bytes: their repr
            h.update(repr(value.tolist()).encode())
        else:
            h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        h.update(f"dict {len(value)}|".encode())
        for k in sorted(value, key=str):
            h.update(f"{k!r}=".encode())
            _feed(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"seq {len(value)}|".encode())
        for x in value:
            _feed(h, x)
    else:
        h.update(f"{type(value).__name__} {value!r}|".encode())


def fingerprint(items: Iterable[Item]) -> str:
    """``sha256:<hex>`` of the policy of ``items`` (in the order given)."""
    h = hashlib.sha256()
    for it in items:
        _feed(
            h,
            {
                "id": it.id,
                "points": it.points,
                "rtol": it.rtol,
                "atol": it.atol,
                "forbidden": sorted(it.forbidden),
                "cases": [dict(c) for c in it.cases(SEED)],
            },
        )
    return "sha256:" + h.hexdigest()

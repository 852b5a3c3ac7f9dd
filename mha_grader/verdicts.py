"""What a verdict is: the status words of a result and ``ItemResult``, the verdict on one item.

The statuses a child may report (``CHILD_STATUSES``; anything else from it is "crashed") and
those only the parent decides (``PARENT_STATUSES``) are fixed here; the feedback renders each from
a fixed vocabulary (``feedback.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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

"""What an nbgrader test cell runs: one graded item, checked on the notebook kernel's functions.

``mha-course release`` writes one test cell per item (see ``release.py``); nbgrader gives the
cell's points when the cell runs without an error, so under nbgrader (``NBGRADER_EXECUTION`` set)
``assert_item`` raises ``ItemFailed`` with the course's feedback (status and the named mistake)
when the item does not pass; in a learner's own run it prints the same and returns, so Run All
goes on to the next task. The error's
traceback is that one line: IPython would otherwise print the cell's source around the failing
call, and with it the hidden tests' seed, into the student's feedback.

The learner's code and this check share one kernel, as always with nbgrader's autograding: use
nbgrader's points where its trust model is enough, ``mha-course grade`` where it is not.
"""

from __future__ import annotations

import os

LEARNER_SEED = 12345


class ItemFailed(AssertionError):
    """A graded item did not pass; shown by IPython as its message only (no source lines)."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for a custom traceback
        return [f"{type(self).__name__}: {self}"]


def assert_item(item_id: str, seed: int = LEARNER_SEED, namespace: dict | None = None) -> None:
    """Grade item ``item_id`` on the functions in ``namespace`` (default: the notebook's globals)
    with inputs from ``seed``; print one line; unless it passed, raise ``ItemFailed`` where a
    grade is computed (``grading_a_grade``), else print where the next hint is.

    Returns nothing: a value shown by a test cell would be read by nbgrader as partial credit."""
    from mha_grader.inprocess import grade_namespace
    from mha_grader.registry import all_items
    from mha_grader.report import line

    items = [it for it in all_items() if it.id == item_id]
    if not items:
        raise ValueError(
            f"item_id: expected a graded item id such as 'ex02_attention', got {item_id!r}"
        )
    if namespace is None:
        import __main__

        namespace = vars(__main__)
    try:
        (result,) = grade_namespace(namespace, items, int(seed), public=int(seed) == LEARNER_SEED)
    except Exception as e:  # a grader error: no traceback either (it would show the cell's source)
        raise ItemFailed(f"{item_id}: the check itself failed ({type(e).__name__})") from None
    print(line(result))
    if not result.passed:
        from mha_course.grading.hints import pointer

        call = pointer(result.id)
        stuck = f" (stuck? {call} shows the next hint)" if call else ""
        if grading_a_grade():
            raise ItemFailed(f"{result.id}: {result.status}: {result.message}{stuck}")
        print(f"  not passed yet{stuck}; the notebook goes on (Run All reaches 'Check your work')")


def grading_a_grade() -> bool:
    """True where a grade is computed from this cell's error: nbgrader's autograde and validate
    set ``NBGRADER_EXECUTION`` in the kernel's environment (``MHA_STRICT_TESTS=1`` does the same
    elsewhere). A learner's own run only reports, so Run All does not stop at the first task."""
    return bool(os.environ.get("NBGRADER_EXECUTION") or os.environ.get("MHA_STRICT_TESTS"))

"""One module per chapter, ``chNN.py``, each defining ``ITEMS: list[Item]`` (see docs/grading.md).

``item_label`` is how the engine's feedback names an item to a learner: the task number the
exercise's hints table gives it (the engine reads it from here; it imports nothing of the course).
"""

from __future__ import annotations


def item_label(item_id: str) -> str | None:
    """``"task 3"`` for an item with hints (the course's table), else None."""
    from mha_course.grading.hints import table

    for tasks in table().values():
        for k, t in tasks.items():
            if t["item"] == item_id:
                return f"task {k}"
    return None

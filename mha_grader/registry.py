"""Find every chapter's graded items: each ``mha_course/grading/chapters/chNN.py`` defines ``ITEMS``.

The engine is generic and imports nothing of the course: the course's policy (items, mistakes,
forbidden lists) is found by name, ``COURSE_CHAPTERS`` (a package of ``chNN`` modules). That
package may also define ``item_label(item_id) -> str | None``, how its feedback names an item
to a learner (``"task 3"``); the engine stores it on the item (``Item.label``).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from mha_grader.items import Item

COURSE_CHAPTERS = "mha_course.grading.chapters"


def all_items() -> list[Item]:
    """Every graded item of the course, in chapter order (ids must be unique)."""
    return list(_all_items())


@functools.lru_cache(maxsize=1)
def _all_items() -> tuple[Item, ...]:
    """Computed once per process: the checks below parse the course's modules (a few ms), and
    ``resolve`` asks for the items at every call (a class's generator called it 8,448 times)."""
    chapters = importlib.import_module(COURSE_CHAPTERS)

    items: list[Item] = []
    for info in sorted(pkgutil.iter_modules(chapters.__path__), key=lambda m: m.name):
        if info.name.startswith("ch"):
            items.extend(importlib.import_module(f"{chapters.__name__}.{info.name}").ITEMS)
    label = getattr(chapters, "item_label", None)
    if label is not None:
        items = [replace(it, label=label(it.id) or "") for it in items]
    ids = [it.id for it in items]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"grade ids must be unique; repeated: {sorted(dup)}")
    _check_forbidden(tuple(sorted({f for it in items for f in it.forbidden})))
    check_substitutes(items)
    return tuple(items)


@functools.lru_cache(maxsize=8)
def _check_forbidden(names: tuple[str, ...]) -> None:
    """Every forbidden name must resolve (a typo would otherwise forbid nothing)."""
    from mha_grader.stage import check_forbidden

    check_forbidden(names)


def notebooks() -> dict[str, list[Item]]:
    """Exercise notebook stem -> its items, e.g. ``{"ex01_dot_product_attention": [...]}``."""
    out: dict[str, list[Item]] = {}
    for it in all_items():
        out.setdefault(it.notebook, []).append(it)
    return out


def resolve(name: str | Path) -> str:
    """``"ex02"``, ``"ex02_scaled_dot_product_attention"`` or a path -> the notebook stem."""
    stem = Path(str(name)).stem
    known = notebooks()
    if stem in known:
        return stem
    hits = [k for k in known if k.split("_")[0] == stem]
    if len(hits) == 1:
        return hits[0]
    raise ValueError(
        f"name: expected an exercise notebook (one of {sorted(known)}) or its exNN prefix, "
        f"got {name!r}"
    )


def items_for(notebook: str | Path) -> list[Item]:
    """The items graded in one exercise notebook."""
    return notebooks()[resolve(notebook)]


class BadSubstitute(ValueError):
    """An item declares a substitute the engine cannot use safely."""


def check_substitutes(items: Sequence[Item]) -> None:
    """A declared substitute replaces the function of an EARLIER item of the same notebook, is
    not among the later item's own forbidden names, and names a def of the course (``locate``).
    Here, not in ``substitute.py``: that one asks this module for the course's items."""
    from mha_grader.stage import UnresolvedForbidden, locate

    seen: dict[str, list[str]] = {}
    for it in items:
        earlier = seen.setdefault(it.notebook, [])
        for fn, path in it.substitutes:
            if fn not in earlier:
                raise BadSubstitute(
                    f"{it.id}: substitutes: expected the function of an earlier item of "
                    f"{it.notebook} (one of {earlier}), got {fn!r}"
                )
            if path in it.forbidden:
                raise BadSubstitute(f"{it.id}: substitutes: {path} is forbidden to this item")
            try:
                locate(path)
            except UnresolvedForbidden as e:
                raise BadSubstitute(f"{it.id}: substitutes: {e}") from None
        earlier.append(it.function)

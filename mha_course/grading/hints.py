"""Hints in levels, asked for by the learner: ``hint("ex04", 3)`` prints the next level of task 3.

The levels come from ``hints.json`` beside this module, which ``mha-course release`` writes from
the solution notebooks' ``# HINT k:`` lines (``release.py``): level 1 is a nudge (where to look),
level 2 the approach, the last level close to the code. The kernel remembers, per task, the last
level shown, so each call goes one level further; ``level=`` asks for one level directly (and
the next call continues from there).
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
from pathlib import Path

HINTS_JSON = Path(__file__).with_name("hints.json")

_shown: dict[tuple[str, int], int] = {}  # (exercise stem, task) -> last level shown in this kernel


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict[str, dict]]:
    """Exercise stem -> task number (str) -> {"item", "title", "levels"}."""
    return json.loads(HINTS_JSON.read_text(encoding="utf-8"))


# Which levels the learner asked for, remembered for `mha-course progress` (the next level not
# asked). Kept here, with the hints, so that the progress report reads it from below.
def state_file() -> Path:
    """Where ``hint`` records the levels asked: ``$MHA_COURSE_STATE`` or ``~/.mha-course/hints-asked.json``."""
    return Path(
        os.environ.get("MHA_COURSE_STATE") or Path.home() / ".mha-course" / "hints-asked.json"
    )


def hints_asked() -> dict[str, dict[str, int]]:
    """Exercise stem -> task (str) -> the highest hint level asked so far."""
    try:
        return json.loads(state_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def record_hint(stem: str, task: int, level: int) -> None:
    """Remember that hint ``level`` of ``task`` was shown (never fails the hint itself)."""
    asked = hints_asked()
    tasks = asked.setdefault(stem, {})
    tasks[str(task)] = max(int(level), tasks.get(str(task), 0))
    try:
        path = state_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asked, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except OSError:
        pass


def _stem(exercise: str) -> str:
    known = table()
    if exercise in known:
        return exercise
    hits = [k for k in known if k.split("_")[0] == exercise]
    if len(hits) != 1:
        raise ValueError(
            f"exercise: expected an exercise such as 'ex04' (one of "
            f"{sorted(k.split('_')[0] for k in known)}), got {exercise!r}"
        )
    return hits[0]


def call(prefix: str, task: int | str, cli: bool = False) -> str:
    """How to ask for ``task``'s next hint: ``hint("ex04", 3)`` in Python, ``mha-course hint ex04 3`` in a
    terminal (where ``check`` and ``progress`` print it)."""
    return f"mha-course hint {prefix} {task}" if cli else f'hint("{prefix}", {task})'


def _listing(stem: str, cli: bool = False) -> str:
    prefix = stem.split("_")[0]
    lines = [f"{stem}: hints for each task, one level per call"]
    for k, t in table()[stem].items():
        lines.append(
            f"  {call(prefix, k, cli)}  task {k} — {t['title']} ({len(t['levels'])} levels)"
        )
    return "\n".join(lines)


def hint_text(
    exercise: str, task: int | None = None, level: int | None = None, cli: bool = False
) -> str:
    """What ``hint`` prints (and, unless ``level`` is given, advances the remembered level).

    ``cli``: for ``mha-course hint``, a new process each time: the next level is the one after the
    highest asked so far (``~/.mha-course/hints-asked.json``, as ``progress`` reads), not this kernel's.
    """
    stem = _stem(exercise)
    if task is None:
        return _listing(stem, cli)
    tasks = table()[stem]
    if str(task) not in tasks:
        raise ValueError(f"task: expected one of {', '.join(tasks)} for {stem}, got {task!r}")
    entry, key = tasks[str(task)], (stem, int(task))
    n = len(entry["levels"])
    if level is None:
        if cli:
            before = hints_asked().get(stem, {}).get(str(task), 0)
        else:
            before = _shown.get(key, 0)
        level = min(before + 1, n)
    elif not 1 <= int(level) <= n:
        raise ValueError(f"level: expected 1 .. {n} for {stem} task {task}, got {level!r}")
    level = int(level)
    _shown[key] = level
    record_hint(stem, int(task), level)  # for `mha-course progress`: the next level not asked
    body = "\n".join(
        textwrap.fill(line, width=96, initial_indent="  ", subsequent_indent="  ")
        for line in entry["levels"][level - 1].split("\n")
    )
    prefix = stem.split("_")[0]
    if level < n:
        after = f"({'run' if cli else 'call'} {call(prefix, task, cli)} again for hint {level + 1} of {n})"
    else:
        after = "(that was the last hint; the chapter's notebook shows the idea worked out)"
    return f"{prefix} task {task} — {entry['title']}: hint {level} of {n}\n{body}\n{after}"


def hint(exercise: str, task: int | None = None, level: int | None = None) -> None:
    """Print the next hint level for ``task`` of ``exercise`` (``"ex04"``), or level ``level``.

    ``hint("ex04")`` lists the tasks and how many levels each has. Prints; returns nothing.
    """
    print(hint_text(exercise, task, level))


def pointer(item_id: str, cli: bool = False) -> str | None:
    """``'hint("ex04", 3)'`` (``'mha-course hint ex04 3'`` if ``cli``) for a graded item's id, or None if
    it has no hints."""
    for stem, tasks in table().items():
        for k, t in tasks.items():
            if t["item"] == item_id:
                return call(stem.split("_")[0], k, cli)
    return None


def hint_notes(results, cli: bool = False) -> list[str]:
    """One note per failed item (an ``ItemResult``) that has hints: which call (``cli``: which terminal
    command) shows the next one."""
    calls = [(r.id, None if r.passed else pointer(r.id, cli)) for r in results]
    return [f"stuck on {item_id}? {call} shows the next hint" for item_id, call in calls if call]


def reset() -> None:
    """Forget which levels this kernel has shown."""
    _shown.clear()

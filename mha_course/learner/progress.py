"""Your progress through the exercises: ``mha-course progress`` or ``mha_course.progress()``.

For every exercise: which items pass on the public self-check inputs (seed 12345, as ``check``
uses), the points so far, and the next hint level you have not asked for yet. It reads your own
saved notebooks (``exercises/`` by default, or the folder you name, e.g. ``my-work/``), grades them
with the self-check machinery (``mha_course.grading.grade_submission``: each notebook run in a
child process, sandboxed where the machine allows), and changes nothing. Hints you asked for
(``hint(...)``) are remembered in ``~/.mha-course/hints-asked.json`` (or ``$MHA_COURSE_STATE``).

Save the notebook first (Ctrl-S): what is graded is the file, not the kernel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mha_course.grading.hints import hints_asked


@dataclass
class Exercise:
    """One exercise's progress."""

    stem: str
    notebook: Path | None  # None: not found in the folder
    results: list = field(default_factory=list)  # mha_grader.compare.ItemResult
    max_points: float = 0.0
    next_hints: list[str] = field(default_factory=list)  # 'hint("ex04", 3)  (level 2 of 3)'

    @property
    def points(self) -> float:
        return sum(r.points for r in self.results)


class Progress(list):
    """The rows ``progress()`` returns: a list of :class:`Exercise` whose repr is one line.

    A cell ending in ``mha_course.progress()`` shows the printed table, then this one line, instead of
    the dataclasses' full repr (every item's result: tens of kilobytes).
    """

    def __repr__(self) -> str:
        found = [row for row in self if row.notebook is not None]
        points = sum(row.points for row in self)
        top = sum(row.max_points for row in self)
        return (
            f"<progress: {points:g}/{top:g} points, {len(found)} of {len(self)} exercises found; "
            "the rows are a list of Exercise>"
        )


def _next_hints(stem: str, results: list, cli: bool = False) -> list[str]:
    """For each failing item with hints: the call (``cli``: the terminal command) that shows the first
    level not asked yet."""
    from mha_course.grading.hints import call, table

    asked = hints_asked().get(stem, {})
    failing = {r.id for r in results if not r.passed}
    out = []
    prefix = stem.split("_")[0]
    for task, entry in table().get(stem, {}).items():
        if entry["item"] in failing:
            level, n = asked.get(task, 0) + 1, len(entry["levels"])
            out.append(
                f"{call(prefix, task, cli)} level {level} of {n}"
                if level <= n
                else f"{call(prefix, task, cli)}: all {n} levels asked"
            )
    return out


def collect(folder: str | os.PathLike = "exercises", cli: bool = False) -> list[Exercise]:
    """Grade every exercise found in ``folder`` (by file name) on the public inputs (``cli``: the next
    hints as terminal commands, for ``mha-course progress``)."""
    from mha_course.grading import grade_submission
    from mha_course.grading.nbgrader_tests import LEARNER_SEED
    from mha_grader.registry import notebooks

    folder = Path(folder)
    known = notebooks()
    found = {
        stem: folder / f"{stem}.ipynb" for stem in known if (folder / f"{stem}.ipynb").is_file()
    }
    graded = (
        grade_submission(found, {stem: known[stem] for stem in found}, LEARNER_SEED)
        if found
        else {}
    )
    rows = []
    for stem, items in known.items():
        row = Exercise(stem, found.get(stem), max_points=sum(it.points for it in items))
        if stem in graded:
            row.results = list(graded[stem][0])
            row.next_hints = _next_hints(stem, row.results, cli)
        rows.append(row)
    return rows


def report(rows: list[Exercise]) -> str:
    """The table ``mha-course progress`` prints: one line per exercise (✓ passed, · to do)."""
    lines = []
    for row in rows:
        if row.notebook is None:
            lines.append(f"{row.stem:36s}   -/{row.max_points:<3g} (no notebook here)")
            continue
        marks = " ".join(("✓" if r.passed else "·") + r.id.split("_", 1)[-1] for r in row.results)
        nxt = f"   next: {row.next_hints[0]}" if row.next_hints else ""
        lines.append(f"{row.stem:36s} {row.points:3g}/{row.max_points:<3g} {marks}{nxt}")
    lines.append(
        f"total: {sum(r.points for r in rows):g}/{sum(r.max_points for r in rows):g} points "
        "on the public self-check inputs (your grade uses other, secret inputs)"
    )
    return "\n".join(lines)


def progress(
    folder: str | os.PathLike = "exercises", quiet: bool = False, cli: bool = False
) -> Progress:
    """Print (unless ``quiet``) and return your progress on every exercise in ``folder``.

    From a notebook in ``exercises/`` or ``notebooks/``, ``progress("../exercises")``; a relative
    ``folder`` not found here is looked up in the folders above (as ``mha-course check`` does).
    """
    path = Path(folder)
    if not path.is_dir():
        from mha_course.learner.paths import locate_folder

        path = locate_folder(path) or path
    rows = Progress(collect(path, cli=True) if cli else collect(path))
    if not quiet:
        print(f"progress in {path}/ (saved notebooks; nothing is changed)")
        print(report(rows))
    return rows

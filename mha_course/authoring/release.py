"""solutions/ -> exercises/ (the course's student copies), the hints table, and an nbgrader source.

Student copy (``exercises/``): each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block becomes
two lines, the task and a ``raise NotImplementedError`` that says what to write and how to ask for
a hint. No hint text is released in the notebook. After each item's section an nbgrader **test
cell** (graded, locked, points = the item's points) runs the course's check of that item on the
learners' inputs (seed 12345). Outputs and execution counts are cleared, so the file written is
deterministic and ``--check`` can compare it byte for byte.

Hints (one source: the solution blocks, read by ``authoring/solution_blocks.py``) go to
``mha_course/grading/hints.json``; the test cells are ``authoring/test_cells.py``'s, the box of
conventions above every exercise ``authoring/conventions.py``'s.

nbgrader source (``mha-course release --nbgrader COURSE``): the solutions with the task line moved
just above ``### BEGIN SOLUTION`` (so nbgrader's own stub keeps it; hints stay out here too) and
the same test cells, each with a ``### BEGIN HIDDEN TESTS`` region that checks again on inputs
from the instructor's seed. ``nbgrader generate_assignment`` removes that region from the student
version and ``nbgrader autograde`` puts it back, so the seed is only ever in the instructor's
files and the student version equals ``exercises/`` except for the stub lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from mha_course.authoring.conventions import (  # noqa: F401 - public names of release.py before
    CONVENTIONS,
    CONVENTIONS_ID,
    conventions_cell,
    with_conventions,
)
from mha_course.authoring.solution_blocks import (  # noqa: F401 - public names of release.py before
    BEGIN,
    END,
    Task,
    hints_table,
    hints_text,
    levels,
    stub_source,
    task_outside,
    tasks,
)
from mha_course.authoring.test_cells import (  # noqa: F401 - public names of release.py before
    HIDDEN_BEGIN,
    HIDDEN_END,
    test_cell,
    test_cell_source,
    with_test_cells,
)
from mha_grader.items import Item

HINTS_FILE = Path("mha_course") / "grading" / "hints.json"  # relative to the repository root


def _read(solution: Path) -> tuple[nbformat.NotebookNode, dict[str, Item]]:
    from mha_grader.registry import all_items

    nb = nbformat.read(solution, as_version=4)
    items = {it.id: it for it in all_items() if it.notebook == solution.stem}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb, items


RUN_ON = "raises-exception"  # JupyterLab and nbclient go on past such a cell (stop_on_error false)


def _run_on(cells: list) -> None:
    """Self-check cells get the ``raises-exception`` tag: a stub's NotImplementedError, or a
    wrong answer's assertion, is shown there and Run All still reaches "Check your work"."""
    for cell in cells:
        tags = cell.metadata.get("tags", [])
        if "self-check" in tags and RUN_ON not in tags:
            cell.metadata["tags"] = [*tags, RUN_ON]


def exercise_from_solution(solution: Path) -> str:
    """The exercise notebook's text for one solution notebook."""
    nb, items = _read(solution)
    _run_on(nb.cells)
    for i, task in tasks(nb, solution.stem).items():
        nb.cells[i].source = stub_source(nb.cells[i].source, task)
    nb.cells = with_conventions(with_test_cells(nb.cells, items, seed=None))
    return nbformat.writes(nb) + "\n"


def nbgrader_source(solution: Path, seed: int) -> str:
    """The nbgrader source notebook for one solution notebook (hidden tests on ``seed``)."""
    nb, items = _read(solution)
    _run_on(nb.cells)
    for i, task in tasks(nb, solution.stem).items():
        nb.cells[i].source = task_outside(nb.cells[i].source, task)
    nb.cells = with_conventions(with_test_cells(nb.cells, items, seed=seed))
    return nbformat.writes(nb) + "\n"


MISTAKES_FILE = Path("docs") / "mistakes.md"  # relative to the repository root


def mistakes_page() -> str:
    """``docs/mistakes.md``: every graded item and the mistakes its feedback names, by exercise
    (generated from the items, so the list is the grader's own vocabulary)."""
    from mha_grader.compare import mistake_text
    from mha_grader.registry import notebooks

    out = [
        "# The named mistakes",
        "",
        "Written by `mha-course release` from the graded items (`mha_course/grading/chapters/`): "
        "each item's task and the mistakes its feedback recognises by name. Feedback names the "
        'symptom; the hint levels (`hint("exNN", k)`) lead to the fix.',
        "",
    ]
    for stem, items in notebooks().items():
        out += [f"## {stem}", ""]
        for it in items:
            out.append(f"- `{it.id}` (`{it.function}`): {it.task}")
            out += [f"  - {t}" for t in dict.fromkeys(mistake_text(m) for m in it.mistakes)]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _write_if_changed(path: Path, text: str, check: bool, changed: list[Path]) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        changed.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")


def release(
    solutions: Path,
    exercises: Path,
    check: bool = False,
    hints: Path | None = None,
    work: list[tuple[Path, Path | None]] | None = None,
) -> list[Path]:
    """Write (or with ``check``, only compare) ``exercises/``, the hints table ``hints``
    (default: ``mha_course/grading/hints.json`` beside ``exercises/``) and the list of named
    mistakes (``docs/mistakes.md`` beside ``exercises/``, when that folder has a ``docs/``)
    from ``solutions/`` and the graded items.

    An exercise that holds a learner's work (``keep_work.holds_work``) is copied to
    ``exercises/backup-<time>/`` before it is written; each such file and its copy (``None`` with
    ``check``) is appended to ``work``. Returns the files that were (or would be) changed.
    """
    from mha_course.authoring.keep_work import back_up, backup_folder, holds_work

    folder = backup_folder(exercises)
    hints = hints if hints is not None else exercises.parent / HINTS_FILE
    changed: list[Path] = []
    _write_if_changed(hints, hints_text(solutions), check, changed)
    if (exercises.parent / "docs").is_dir():
        _write_if_changed(exercises.parent / MISTAKES_FILE, mistakes_page(), check, changed)
    for sol in sorted(solutions.glob("ex*.ipynb")):
        target = exercises / sol.name
        text = exercise_from_solution(sol)
        on_disk = target.read_text(encoding="utf-8") if target.exists() else None
        if on_disk != text:
            changed.append(target)
            if on_disk is not None and holds_work(on_disk, text):
                copy = None if check else back_up(target, folder)
                if work is not None:
                    work.append((target, copy))
            if not check:
                exercises.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    stale = [p for p in sorted(exercises.glob("ex*.ipynb")) if not (solutions / p.name).exists()]
    return changed + stale


NBGRADER_CONFIG = """\
# Written by `mha-course release --nbgrader`. nbgrader reads this from the course folder.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "mha-course"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# Feedback shows each test cell's output but not its hidden region (which holds the seed).
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
"""


def release_nbgrader(
    solutions: Path, course: Path, assignment: str, seed: int, names: list[str] | None = None
) -> list[Path]:
    """Write ``COURSE/source/ASSIGNMENT/exNN_<topic>.ipynb`` (and a minimal
    ``nbgrader_config.py`` if the course has none). ``names``: exercise prefixes or stems to
    include (default: all). Returns the notebooks written."""
    from mha_grader.registry import resolve

    if not re.fullmatch(r"[A-Za-z0-9_\-]+", assignment):
        raise ValueError(
            f"assignment: expected a folder name of letters, digits, - and _, got {assignment!r}"
        )
    wanted = {resolve(n) for n in names} if names else None
    source = course / "source" / assignment
    source.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(NBGRADER_CONFIG, encoding="utf-8")
    written = []
    for sol in sorted(solutions.glob("ex*.ipynb")):
        if wanted is None or sol.stem in wanted:
            target = source / sol.name
            target.write_text(nbgrader_source(sol, seed), encoding="utf-8")
            written.append(target)
    return written

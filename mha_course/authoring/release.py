"""solutions/ -> exercises/ (the course's student copies), the hints table, and an nbgrader source.

Student copy (``exercises/``): each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block becomes
two lines, the task and a ``raise NotImplementedError`` that says what to write and how to ask for
a hint. No hint text is released in the notebook. After each item's section an nbgrader **test
cell** (graded, locked, points = the item's points) runs the course's check of that item on the
learners' inputs (seed 12345). Outputs and execution counts are cleared, so the file written is
deterministic and ``--check`` can compare it byte for byte.

Hints (one source: the solution blocks). A block holds numbered levels, ``# HINT 1: ...`` (a
nudge: where to look), ``# HINT 2: ...`` (the approach), ``# HINT 3: ...`` (close to the code); a
level may go on over several lines with the same prefix. ``release`` writes them, per exercise
and task, to ``mha_course/grading/hints.json``, which ``mha_course.hint("ex04", 3)`` reads one
level per call. The task number and title come from the ``## Task k — title`` heading above the
solution cell; ``# TASK: <one line>`` in the block overrides the title shown in the stub.

nbgrader source (``mha-course release --nbgrader COURSE``): the solutions with the task line moved
just above ``### BEGIN SOLUTION`` (so nbgrader's own stub keeps it; hints stay out here too) and
the same test cells, each with a ``### BEGIN HIDDEN TESTS`` region that checks again on inputs
from the instructor's seed. ``nbgrader generate_assignment`` removes that region from the student
version and ``nbgrader autograde`` puts it back, so the seed is only ever in the instructor's
files and the student version equals ``exercises/`` except for the stub lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from mha_course.grading.nbgrader_tests import (
    LEARNER_SEED,  # the seed check() uses: inputs learners may see
)
from mha_grader.compare import dtype_rule, reference_dtypes
from mha_grader.items import Item

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_HINT = re.compile(r"^\s*# HINT(?:\s+(\d+))?\s*:\s?(.*)$")
_TASK = re.compile(r"^\s*# TASK:\s?(.*)$")
_HEADING = re.compile(r"^#+\s*Task\s+(\d+)\s*[—:-]*\s*(.*?)\s*(?:\(\d+(?:\.\d+)? points?\))?\s*$")
HINTS_FILE = Path("mha_course") / "grading" / "hints.json"  # relative to the repository root


@dataclass
class Task:
    """One solution cell: the exercise's prefix (``ex04``), its task number and title, its levels."""

    exercise: str
    number: int
    title: str
    item: str = ""
    levels: list[str] = field(default_factory=list)

    def call(self) -> str:
        return f'from mha_course import hint; hint("{self.exercise}", {self.number})'

    def comment(self) -> str:
        return f"# TASK {self.number} — {self.title}. Stuck? {self.call()}"

    def message(self) -> str:
        return f"task {self.number} ({self.title}) is not written yet. Stuck? {self.call()}"


def _map_blocks(source: str, rewrite) -> str:
    """Replace each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block of ``source`` by
    ``rewrite(indent, begin_line, body_lines, end_line) -> lines``."""
    out: list[str] = []
    block: list[str] | None = None
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            block, begin = [], line
        elif stripped == END and block is not None:
            out += rewrite(begin[: len(begin) - len(begin.lstrip())], begin, block, line)
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"source: {BEGIN} without {END}")
    return "\n".join(out)


def _blocks(source: str) -> list[list[str]]:
    found: list[list[str]] = []
    _map_blocks(source, lambda indent, begin, block, end: found.append(block) or [])
    return found


def levels(source: str, where: str = "source") -> list[str]:
    """The hint levels of one cell's solution blocks: ``# HINT k:`` lines, numbered 1, 2, ...
    without gaps (consecutive lines with the same number form one level)."""
    by_level: dict[int, list[str]] = {}
    for block in _blocks(source):
        for m in filter(None, map(_HINT.match, block)):
            if m.group(1) is None:
                raise ValueError(
                    f"{where}: '# HINT:' without a level; write '# HINT 1:', '# HINT 2:', ... "
                    "(see docs/grading.md, 'Hints')"
                )
            by_level.setdefault(int(m.group(1)), []).append(m.group(2).rstrip())
    if sorted(by_level) != list(range(1, len(by_level) + 1)):
        raise ValueError(
            f"{where}: hint levels must be 1, 2, ... without gaps, got {sorted(by_level)}"
        )
    return ["\n".join(by_level[k]) for k in sorted(by_level)]


def _task_override(source: str) -> str:
    for block in _blocks(source):
        for m in filter(None, map(_TASK.match, block)):
            return m.group(1).strip()
    return ""


def _is_hint_or_task(line: str) -> bool:
    return bool(_HINT.match(line) or _TASK.match(line))


def stub_source(source: str, task: Task | None = None) -> str:
    """Replace every solution block in one cell's source by the task line and
    ``raise NotImplementedError`` (no hint text)."""
    task = task or Task("ex", 0, _task_override(source) or "write this function")

    def stub(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        return [
            f"{indent}{task.comment()}",
            f"{indent}raise NotImplementedError({task.message()!r})",
        ]

    return _map_blocks(source, stub)


def task_outside(source: str, task: Task) -> str:
    """Move each solution block's task line to just above its ``### BEGIN SOLUTION`` (nbgrader's
    stub keeps it) and drop its hint lines (they are in hints.json, not in what students get)."""

    def lift(indent: str, begin: str, block: list[str], end: str) -> list[str]:
        return [
            f"{indent}{task.comment()}",
            begin,
            *(b for b in block if not _is_hint_or_task(b)),
            end,
        ]

    return _map_blocks(source, lift)


def tasks(nb: nbformat.NotebookNode, stem: str) -> dict[int, Task]:
    """Cell index -> its ``Task`` for every code cell with a solution block, numbered by the
    ``## Task k — title`` heading above it."""
    heading: tuple[int, str] | None = None
    out: dict[int, Task] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for line in cell.source.split("\n"):
                m = _HEADING.match(line)
                if m:
                    heading = (int(m.group(1)), m.group(2))
                elif line.startswith("#"):
                    heading = None
        elif BEGIN in cell.source:
            where = f"{stem} cell {i}"
            if heading is None:
                raise ValueError(
                    f"{where}: a solution cell needs a '## Task k — title' heading above it"
                )
            if any(t.number == heading[0] for t in out.values()):
                raise ValueError(f"{where}: task {heading[0]} has a second solution cell")
            out[i] = Task(
                stem.split("_")[0],
                heading[0],
                _task_override(cell.source) or heading[1],
                _grade_id(cell),
                levels(cell.source, where),
            )
            if len(out[i].levels) < 2:
                raise ValueError(
                    f"{where}: every task needs at least two hint levels ('# HINT 1:' a nudge, "
                    f"'# HINT 2:' the approach), got {len(out[i].levels)}"
                )
    return out


def test_cell_source(item: Item, seed: int | None = None) -> str:
    """The nbgrader test cell of ``item``; with ``seed``, the hidden re-check on that seed."""
    lines = [
        f"# Graded test: {item.id} ({item.points:g} point{'s' if item.points != 1 else ''}), "
        f"the course's check of `{item.function}`.",
        f"# dtype rule: {dtype_rule(item, reference_dtypes(item) if item.dtype_must_match else None)}.",
        "from mha_course.grading.nbgrader_tests import assert_item",
        "",
        f'assert_item("{item.id}")  # the learners\' inputs (seed {LEARNER_SEED}, as check() uses)',
    ]
    if seed is not None:
        lines += [
            HIDDEN_BEGIN,
            f'assert_item("{item.id}", seed={int(seed)})  # fresh inputs: only the instructor has them',
            HIDDEN_END,
        ]
    return "\n".join(lines)


def test_cell(item: Item, seed: int | None = None) -> nbformat.NotebookNode:
    """A graded, locked nbgrader test cell worth the item's points (deterministic cell id)."""
    cell = nbformat.v4.new_code_cell(test_cell_source(item, seed))
    cell.id = f"{item.id}-test"[:64]
    cell.metadata = nbformat.from_dict(
        {
            "nbgrader": {
                "grade": True,
                "grade_id": f"{item.id}_test",
                "locked": True,
                "points": item.points,
                "schema_version": 3,
                "solution": False,
            },
            "tags": ["graded-check"],
        }
    )
    return cell


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _with_test_cells(cells: list, items: dict[str, Item], seed: int | None) -> list:
    """Insert each item's test cell at the end of its section: after its solution cell and the
    code cells that follow it (its self-checks), before the next markdown or solution cell."""
    out, pending = [], None
    for cell in cells:
        is_solution = cell.metadata.get("nbgrader", {}).get("solution", False)
        ends_section = (
            cell.cell_type != "code"
            or is_solution
            or "graded-check" in cell.metadata.get("tags", [])
        )
        if pending is not None and ends_section:
            out.append(test_cell(pending, seed))
            pending = None
        out.append(cell)
        if is_solution and _grade_id(cell) in items:
            pending = items[_grade_id(cell)]
    if pending is not None:
        out.append(test_cell(pending, seed))
    return out


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


CONVENTIONS_ID = "conventions"
CONVENTIONS = """\
**Conventions** (the same box in every exercise, written by `mha-course release`)

- **Letters.** B batch · L query length · S key/value length · T sequence length where L = S
  (self-attention) · E `embed_dim` · H query heads · G key/value heads · D head size, the query/key
  features (D = E / H) · Dv value features (D unless a task says otherwise) · `...` any leading
  dimensions. Each task's `Shape:` line uses these letters.
- **Dtypes.** A function given floating tensors returns their dtype (float32 in, float32 out;
  float64 in, float64 out). A function given only sizes may return float32 or float64; it is
  compared at the precision it returns. Counts and indices are compared exactly, as any number
  type. Every graded test cell states its item's rule in a `# dtype rule:` line.
- **Masks.** A bool mask is True where a query MAY attend (the convention of torch's SDPA).

**Weights.** How each exercise stores its weight matrices, and so how a projection is written (the
other exercises take no weight matrices):

| exercises | layout | a projection is |
|---|---|---|
| ex03 | the lecture's maths: `W_Q`, `W_K`, `W_V` are (E, D) | `x @ W` |
| ex04 | the lecture's maths: `W_Q`, `W_K`, `W_V`, `W_O` are (E, E) | `x @ W` |
| ex06, ex07, ex15 | `nn.Linear`'s storage (out, in): `W_Q` is (H·D, E), `W_O` is (E, H·D) | `x @ W.T` |
| ex10 | `nn.Linear`'s storage (out, in): `W_Q` is (H·D, E), `W_O` is (E, H·D) | (its tasks slice weights) |
"""


def conventions_cell() -> nbformat.NotebookNode:
    """The conventions box (one source, above): a markdown cell after each exercise's title."""
    cell = nbformat.v4.new_markdown_cell(CONVENTIONS.rstrip("\n"))
    cell.id = CONVENTIONS_ID
    cell.metadata = nbformat.from_dict({"tags": ["conventions"]})
    return cell


def _with_conventions(cells: list) -> list:
    return [cells[0], conventions_cell(), *cells[1:]] if cells else [conventions_cell()]


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
    nb.cells = _with_conventions(_with_test_cells(nb.cells, items, seed=None))
    return nbformat.writes(nb) + "\n"


def nbgrader_source(solution: Path, seed: int) -> str:
    """The nbgrader source notebook for one solution notebook (hidden tests on ``seed``)."""
    nb, items = _read(solution)
    _run_on(nb.cells)
    for i, task in tasks(nb, solution.stem).items():
        nb.cells[i].source = task_outside(nb.cells[i].source, task)
    nb.cells = _with_conventions(_with_test_cells(nb.cells, items, seed=seed))
    return nbformat.writes(nb) + "\n"


def hints_table(solutions: Path) -> dict[str, dict[str, dict]]:
    """Exercise stem -> task number (a string, as JSON keys are) -> its item, title and levels."""
    table: dict[str, dict[str, dict]] = {}
    for sol in sorted(solutions.glob("ex*.ipynb")):
        found = tasks(nbformat.read(sol, as_version=4), sol.stem).values()
        table[sol.stem] = {
            str(t.number): {"item": t.item, "title": t.title, "levels": t.levels}
            for t in sorted(found, key=lambda t: t.number)
        }
    return table


def hints_text(solutions: Path) -> str:
    return json.dumps(hints_table(solutions), indent=1, ensure_ascii=False) + "\n"


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

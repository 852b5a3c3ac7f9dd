"""``mha-course handout DIR``: the student repository, without ``solutions/``.

What goes in: the lectures (``notebooks/``), the exercises written afresh from ``solutions/``
(the stubs ``mha-course release`` writes, never a copy of an ``exercises/`` that may hold someone's
work), the package (``mha_course/``, ``mha_grader/``, ``pyproject.toml``: what ``mha-course
check`` needs), what the lectures read (``results/``, ``checkpoints/``, ``configs/``), ``make lab``
(``Makefile``, ``tools/lab.py``, ``tools/torch_index.py``), the licence and a README with the two
commands a student needs. What stays out: ``solutions/``, ``tests/``, ``classroom/`` (the
autograder and its key), ``docs/``, ``benchmarks/``, keys, caches, hidden files and links.

What stays public in any case: the course package is the course's own implementation, so its
code answers many items (they forbid calling it, see the instructor guide; copying its source is
what the similarity report finds).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

FOLDERS = ("notebooks", "mha_course", "mha_grader", "results", "checkpoints", "configs")
FILES = ("pyproject.toml", "LICENSE", "Makefile", "tools/lab.py", "tools/torch_index.py")
LEFT_OUT = ("solutions", "tests", "classroom", "docs", "benchmarks")
_SKIP = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", "backup"}
_SKIP_SUFFIXES = (".pyc", ".key", ".whl")
MARKER = "### BEGIN SOLUTION"

README = """\
# mha-course — multi-head attention, from one dot product to MQA/GQA

Lectures in `notebooks/` (start with `notebooks/00_start_here.ipynb`), exercises in `exercises/`.

## Two commands

You need Python >= 3.10 and `make` (Linux, macOS).

```bash
make lab                                                     # installs the course into .venv, opens JupyterLab
.venv/bin/mha-course check exercises/{example}.ipynb  # your notebook, graded as your instructor will
```

Each exercise notebook ends with a cell that runs the same checks in your kernel:
`from mha_course.grading import check; check("exNN")`. Checks use public inputs; your instructor
grades on inputs of your own, so hard-coded outputs do not help. Stuck on a task:
`from mha_course import hint; hint("exNN", k)`.
"""


class HandoutError(ValueError):
    """The handout cannot be written (an argument, a missing source folder)."""


def course_root() -> Path:
    """The checkout the running course comes from (``solutions/`` and ``notebooks/`` beside it)."""
    return Path(__file__).resolve().parents[2]


def _skip(path: Path) -> bool:
    return (
        path.name.startswith(".")
        or path.name in _SKIP
        or path.name.startswith("backup-")
        or path.name.endswith(_SKIP_SUFFIXES)
    )


def _copy_tree(src: Path, dest: Path, written: list[Path]) -> None:
    for here, dirs, files in os.walk(src):  # links to folders are not followed
        dirs[:] = sorted(
            d for d in dirs if not _skip(Path(d)) and not (Path(here) / d).is_symlink()
        )
        rel = Path(here).relative_to(src)
        for name in sorted(files):
            path = Path(here) / name
            if _skip(path) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            target = dest / rel / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            written.append(target)


def write_handout(dest: Path, root: Path | None = None) -> list[Path]:
    """Write the student repository into ``dest`` (new or empty); the files written."""
    from mha_course.authoring.release import exercise_from_solution

    root = root or course_root()
    solutions = root / "solutions"
    if not solutions.is_dir() or not (root / "notebooks").is_dir():
        raise HandoutError(
            f"--source: expected the course's checkout (solutions/ and notebooks/), got {root}"
        )
    if os.path.lexists(dest) and (dest.is_symlink() or not dest.is_dir() or any(dest.iterdir())):
        raise HandoutError(
            f"DIR: expected a new or empty folder, got {dest} (it exists and is not an "
            f"empty folder; nothing is overwritten)"
        )
    dest = dest.resolve()
    if dest.is_relative_to(root.resolve()):
        raise HandoutError(f"DIR: expected a folder outside the course checkout {root}, got {dest}")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in FOLDERS:
        if (root / name).is_dir():
            _copy_tree(root / name, dest / name, written)
    for name in FILES:
        if (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, dest / name)
            written.append(dest / name)
    stems = []
    for sol in sorted(solutions.glob("ex*.ipynb")):
        target = dest / "exercises" / sol.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(exercise_from_solution(sol), encoding="utf-8")
        written.append(target)
        stems.append(sol.stem)
    example = next((s for s in stems if s.startswith("ex02")), stems[0] if stems else "exNN_topic")
    (dest / "README.md").write_text(README.format(example=example), encoding="utf-8")
    written.append(dest / "README.md")
    leaks = [p for p in written if p.suffix == ".ipynb" and MARKER in p.read_text(encoding="utf-8")]
    if leaks:
        raise HandoutError(
            f"refusing: {len(leaks)} handed-out notebook(s) hold solution blocks "
            f"({', '.join(str(p.relative_to(dest)) for p in leaks[:5])}); {dest} is incomplete"
        )
    return written

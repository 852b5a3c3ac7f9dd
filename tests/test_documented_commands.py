"""Documented commands run as written. Each command below is quoted verbatim from a code block
of the file named (the test fails when the doc no longer has it, so a doc edit updates this list),
then run in a scratch copy of the course (solutions/, exercises/, the hints table, classroom/), from
the folder the doc runs it in. ``.venv/bin/`` stands for this environment's scripts folder.

Fast commands only; the long ones (nbgrader's autograde, the Gradescope build, ``make test``) are
run by their own tests (tests/grading/test_nbgrader.py, test_gradescope*.py) and CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^\s*```(?:bash|console|powershell|sh)?\s*\n(.*?)^\s*```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")

SETUP = "setup: "  # a command the test runs first (it makes what the doc assumes), not quoted from the doc

# (doc, command as written (or several, run in turn), where it runs: "root" = the course copy, "outside" = a folder outside
# it, what the output must contain)
DOCUMENTED = [
    (
        "benchmarks/README.md",
        (
            'setup: mkdir -p benchmarks && cp "$PYTHONPATH/benchmarks/families_vs_hf.py" benchmarks/',
            ".venv/bin/python benchmarks/families_vs_hf.py --quick",
        ),
        "root",
        "qwen3 decode impl=sdpa: median",
    ),
    ("README.md", "mha-course release --check", "root", ""),
    (
        "README.md",
        ".venv/bin/mha-course check exercises/ex04_multi_head_attention.ipynb",
        "root",
        "score: 0/9",
    ),
    (
        "README.md",
        (
            "mkdir -p my-work && cp exercises/ex04_multi_head_attention.ipynb my-work/",
            ".venv/bin/mha-course check my-work/ex04_multi_head_attention.ipynb",
        ),
        "root",
        "score: 0/9",
    ),
    ("README.md", ".venv/bin/mha-course hint ex04 3", "root", "ex04 task 3 — "),
    ("README.md", ".venv/bin/mha-course hint ex04", "root", "mha-course hint ex04 3  task 3 — "),
    ("README.md", "mha-course grade submissions/ --out graded/", "root", "graded 0 student(s)"),
    (
        "docs/instructor_guide.md",
        "mha-course release --nbgrader course --assignment ps1 --notebooks ex01 ex02",
        "outside",
        "next, in course: nbgrader generate_assignment ps1",
    ),
    (
        "classroom/README.md",
        "mha-course grade submissions --out graded",
        "root",
        "graded 0 student(s)",
    ),
    (
        "docs/instructor_guide.md",
        ("mha-course grade submissions --out graded --workers 4", "mha-course report graded"),
        "root",
        "-> graded/class_report.html",
    ),
    (
        "docs/instructor_guide.md",
        "mha-course similarity submissions --out similarity",
        "root",
        "0 pair(s) at or over 50%",
    ),
    (
        "docs/instructor_guide.md",
        "mha-course handout ../mha-course-student",
        "root",
        "left out: solutions/",
    ),
    (
        "docs/instructor_guide.md",
        "mha-course grade submissions --out graded-ps1 --assignment ex01,ex02",
        "root",
        "assignment: ex01, ex02",
    ),
    (
        "docs/instructor_guide.md",
        (
            SETUP + "mkdir -p submissions/bob",
            "mha-course grade submissions --out graded --workers 4",
            "mha-course grade submissions --out regrade --key-file graded.key --students bob",
            "mha-course merge graded regrade --replace --out graded-v2",
        ),
        "root",
        "replaced bob: total 0 -> 0, 0 item(s) changed",
    ),
    (
        "CONTRIBUTING.md",
        (
            SETUP + 'cp -r "$PYTHONPATH/tools" "$PYTHONPATH/notebooks" .',  # PYTHONPATH: the course
            ".venv/bin/python tools/chapter_times.py",
            ".venv/bin/python tools/chapter_times.py --calibrate",
            ".venv/bin/python tools/chapter_times.py --write",
        ),
        "root",
        "fitted: ",
    ),
    (
        "docs/instructor_guide.md",
        (
            SETUP + "mkdir -p submissions/bob",
            SETUP + "printf 'folder,Email address\\nbob,bob@example.org\\n' > roster.csv",
            SETUP + "printf 'Student,ID,SIS User ID,SIS Login ID,Section,folder\\n"
            "Builder Bob,1002,S2,bob2,A,bob\\n' > canvas_gradebook.csv",
            "mha-course grade submissions --out graded --workers 4",
            "mha-course export graded --format canvas --roster canvas_gradebook.csv --out canvas_import.csv",
            "mha-course export graded --format moodle --roster roster.csv --out moodle_import.csv",
        ),
        "root",
        "exported 1 student(s), out of",
    ),
    (
        "classroom/README.md",
        """python -c "from mha_grader.keys import new_key_file; new_key_file('classroom/gradescope/key')\"""",
        "root",
        "",
    ),
]


def code_lines(doc: str) -> list[str]:
    """Every command line in the doc's fenced code blocks (``$ `` prompts stripped, comments cut),
    then its inline code spans (the same command may be quoted in a sentence; line breaks in the
    span read as spaces)."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    out = [
        " ".join(span.split()) for span in INLINE.findall(FENCE.sub("", text).replace("\n", " "))
    ]
    for block in FENCE.findall(text):
        for line in block.splitlines():
            line = line.strip()
            line = line[2:] if line.startswith("$ ") else line
            out.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return out


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A fresh copy per command: each runs as in a clean clone."""
    root = tmp_path / "course"
    for name in ("solutions", "exercises", "classroom"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("key", "*.whl"))
    (root / "mha_course" / "grading").mkdir(parents=True)
    shutil.copy(ROOT / "mha_course" / "grading" / "hints.json", root / "mha_course" / "grading")
    (root / "submissions").mkdir()
    return root


@pytest.mark.parametrize(
    "doc, command, where, expect", DOCUMENTED, ids=[str(c[1])[:60] for c in DOCUMENTED]
)
def test_documented_command_runs(doc, command, where, expect, course: Path, tmp_path: Path) -> None:
    commands = (command,) if isinstance(command, str) else command
    for line in commands:
        assert line.startswith(SETUP) or line in code_lines(doc), (
            f"{doc} no longer shows `{line}`: update DOCUMENTED"
        )
    command = "\n".join(["set -e", *(c.removeprefix(SETUP) for c in commands)])
    scripts = Path(sys.executable).parent
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(scripts), os.environ.get("PATH", "")]),
        PYTHONPATH=str(ROOT),
    )
    cwd = course if where == "root" else tmp_path / "outside"
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        command.replace(".venv/bin/", f"{scripts}/"),
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    # `mha-course check` of unfinished work exits 1; nothing else may (`release --check` among them)
    graded_ok = done.returncode == 1 and "mha-course check " in command
    assert done.returncode == 0 or graded_ok, (
        f"`{command}` in {cwd} exited {done.returncode}:\n{out[-3000:]}"
    )
    assert expect in out, out[-3000:]


def test_the_hint_commands_check_suggests_run(course: Path) -> None:
    """``mha-course check`` in a terminal ends each failed item with the command that shows its next
    hint; that command exists and prints the hint (it said ``hint("ex02", 1)``, a Python call, and
    there was no ``mha-course hint``)."""
    scripts = Path(sys.executable).parent
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(scripts), os.environ.get("PATH", "")]),
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        ["mha-course", "check", "exercises/ex02_scaled_dot_product_attention.ipynb"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    suggested = re.findall(r"stuck on \S+\? (.+?) shows the next hint", done.stdout)
    assert suggested and all(s.startswith("mha-course hint ex02 ") for s in suggested), done.stdout[
        -3000:
    ]
    for command in suggested:
        shown = subprocess.run(
            command.split(), cwd=course, env=env, capture_output=True, text=True, timeout=120
        )
        assert shown.returncode == 0 and " of " in shown.stdout and "ex02 task" in shown.stdout, (
            command,
            shown.stdout,
            shown.stderr,
        )


def test_readme_map_lists_every_exercise_items() -> None:
    """Each exercise's row in the README's course map names its graded items (ex12 and ex13 had
    none): the link is followed by a parenthesis."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bare = [
        p.stem
        for p in sorted((ROOT / "exercises").glob("ex*.ipynb"))
        if f"[{p.stem[:4]}](exercises/{p.name}) (" not in readme
    ]
    assert not bare, f"README course map: no items listed for {bare}"

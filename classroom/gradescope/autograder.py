"""Gradescope glue for ``run_autograder`` (run by the course's Python; no student code runs here).

``collect UPLOAD DEST NOTES``: find the exercise notebooks anywhere in the upload (folders,
browser renames such as ``ex02_scaled_dot_product_attention (1).ipynb``) and copy each to
``DEST/<exNN_topic>.ipynb`` as a new plain file; NOTES (JSON) says what was taken and ignored.

``report GRADED NOTES ASSIGNMENT RESULTS SECONDS``: Gradescope's ``results.json`` from the
grader's gradebook folder (``GRADED/student/results.json`` and ``GRADED/grading.json``), with only
the assignment's items when an assignment file lists exercises, the collection notes, and how the
submission was isolated. Written only after ``mha-course grade`` has returned: no child is left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

_EXERCISE = re.compile(r"(?<![A-Za-z0-9])ex(\d{2})(?!\d)", re.IGNORECASE)
_SKIP_DIRS = {".ipynb_checkpoints", "__MACOSX", ".git"}


def _known() -> dict[str, str]:
    """``"ex02"`` -> ``"ex02_scaled_dot_product_attention"`` for every graded exercise."""
    from mha_grader.registry import notebooks

    return {stem.split("_")[0]: stem for stem in notebooks()}


def _candidates(upload: Path) -> tuple[list[Path], list[str]]:
    found, notes = [], []
    for folder, dirs, files in os.walk(upload):  # does not follow links to folders
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(folder) / name
            if name.startswith(".") or not name.lower().endswith(".ipynb"):
                continue
            if path.is_symlink() or not path.is_file():
                notes.append(f"ignored {path.relative_to(upload)}: not a plain file")
                continue
            found.append(path)
    return found, notes


def collect(upload: Path, dest: Path, assignment: set[str] | None) -> dict:
    """Copy the best file for each exercise into ``dest``; return the notes."""
    known = _known()
    dest.mkdir(parents=True, exist_ok=True)
    files, notes = _candidates(upload) if upload.is_dir() else ([], [])
    by_exercise: dict[str, list[Path]] = {}
    for path in files:
        rel = path.relative_to(upload).as_posix()
        m = _EXERCISE.search(path.name)
        prefix = f"ex{m.group(1)}" if m else None
        if prefix not in known:
            notes.append(f"ignored {rel}: not the name of a graded exercise (exNN_<topic>.ipynb)")
        elif assignment is not None and prefix not in assignment:
            notes.append(f"ignored {rel}: {prefix} is not part of this assignment")
        else:
            by_exercise.setdefault(prefix, []).append(path)
    taken = {}
    for prefix, paths in sorted(by_exercise.items()):
        stem = known[prefix]
        # the most recently modified copy; then the exact name; then the shortest path
        best = max(paths, key=lambda p: (p.stat().st_mtime, p.name == f"{stem}.ipynb", -len(str(p))))
        shutil.copyfile(best, dest / f"{stem}.ipynb", follow_symlinks=False)
        rel = best.relative_to(upload).as_posix()
        taken[stem] = rel
        if rel != f"{stem}.ipynb":
            notes.append(f"graded {rel} as {stem}.ipynb")
        for other in paths:
            if other != best:
                notes.append(f"ignored {other.relative_to(upload).as_posix()}: "
                             f"{rel} is a newer copy of {prefix}")
    if not taken:
        notes.insert(0, "no exercise notebook (exNN_<topic>.ipynb) was found in the upload")
    return {"taken": taken, "notes": notes}


def _assignment(path: Path) -> set[str] | None:
    if not path.is_file():
        return None
    return {w.lower()[:4] for w in path.read_text(encoding="utf-8").split()}


def report(graded: Path, notes: dict, assignment: set[str] | None, seconds: float) -> dict:
    """Gradescope's results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/)."""
    res = json.loads((graded / "student" / "results.json").read_text(encoding="utf-8"))
    meta = json.loads((graded / "grading.json").read_text(encoding="utf-8"))
    tests = [t for t in res["tests"] if assignment is None or t["name"][:4] in assignment]
    for t in tests:
        t["visibility"] = "visible"
    lines = [*notes["notes"], *(n for n in res.get("output", "").split("\n") if n.strip())]
    return {
        "score": float(sum(t["score"] for t in tests)),
        "execution_time": max(0, round(seconds)),
        "output": "\n".join(lines),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"isolation": meta.get("isolation", "unknown"), "graded_files": notes["taken"]},
    }


def failed(message: str, seconds: float) -> dict:
    """results.json when the grader itself could not run: no points, a message, no guesswork."""
    return {"score": 0.0, "execution_time": max(0, round(seconds)), "visibility": "visible",
            "stdout_visibility": "hidden", "tests": [],
            "output": f"The autograder could not grade this submission: {message}. "
                      "Your instructor can see the log; please tell them."}


def main(argv: list[str]) -> int:
    if argv[:1] == ["collect"] and len(argv) == 5:
        upload, dest, notes, assignment = map(Path, argv[1:])
        notes.write_text(json.dumps(collect(upload, dest, _assignment(assignment)), indent=1),
                         encoding="utf-8")
        return 0
    if argv[:1] == ["report"] and len(argv) == 6:
        graded, notes, assignment, results = map(Path, argv[1:5])
        seconds = float(argv[5])
        if (graded / "student" / "results.json").is_file():
            out = report(graded, json.loads(notes.read_text(encoding="utf-8")), _assignment(assignment), seconds)
        else:
            out = failed("the grader stopped with an error", seconds)
        tmp = results.with_name(results.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=1), encoding="utf-8")
        tmp.replace(results)
        return 0
    print("usage: autograder.py collect UPLOAD DEST NOTES ASSIGNMENT | "
          "report GRADED NOTES ASSIGNMENT RESULTS SECONDS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Results for people and for Gradescope: console lines, feedback.md, results.json, grades.csv."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from mha_grader.compare import ItemResult
from mha_grader.outputs import csv_cell, mkdir_new, write_new


def line(r: ItemResult) -> str:
    """``PASSED  ex02_sdpa  3/3  all 4 cases match``."""
    word = "PASSED" if r.passed else "FAILED"
    return f"{word:6}  {r.id:32} {r.points:g}/{r.max_points:g}  {r.status}: {r.message}"


def print_results(results: list[ItemResult], notes: list[str] = (), title: str = "") -> None:
    if title:
        print(title)
    for r in results:
        print(line(r))
    for n in notes:
        print(f"  note: {n}")
    total, most = sum(r.points for r in results), sum(r.max_points for r in results)
    print(f"score: {total:g}/{most:g}")


def gradescope(results: list[ItemResult], notes: list[str] = (), mistakes: dict[str, str] | None = None) -> dict:
    """Gradescope's results schema: score + one test per item; each test's ``extra_data`` holds
    the status and, where the feedback names one, the mistake's id (``class_report.mistake_id``)."""
    mistakes = mistakes or {}
    return {
        "score": float(sum(r.points for r in results)),
        "tests": [{"name": r.id, "score": float(r.points), "max_score": float(r.max_points),
                   "status": "passed" if r.passed else "failed",
                   "output": f"{r.status}: {r.message}",
                   "extra_data": {"status": r.status, **({"mistake": mistakes[r.id]} if r.id in mistakes else {})}}
                  for r in results],
        "output": "\n".join(notes),
    }


def feedback_md(student: str, results: list[ItemResult], notes: list[str] = ()) -> str:
    total, most = sum(r.points for r in results), sum(r.max_points for r in results)
    out = [f"# Feedback for {student}", "", f"**Score: {total:g} / {most:g}**", "",
           "| item | points | status | feedback |", "|---|---|---|---|"]
    for r in results:
        msg = r.message.replace("|", "\\|").replace("\n", " ")
        out.append(f"| `{r.id}` (`{r.function}`) | {r.points:g}/{r.max_points:g} | {r.status} | {msg} |")
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


NOT_ISOLATED = "not isolated"


def write_student(out_dir: Path, student: str, results: list[ItemResult], notes: list[str],
                  isolation: str = "", mistakes: dict[str, str] | None = None) -> None:
    """``OUT/<student>/results.json`` and ``feedback.md``: new files in a new folder, no links
    followed. ``isolation="none"`` stamps "not isolated" on both."""
    if isolation == "none":
        notes = [f"{NOT_ISOLATED}: graded with --no-isolation (no sandbox)", *notes]
    d = out_dir / student
    mkdir_new(d)
    write_new(d / "results.json", json.dumps(gradescope(results, notes, mistakes), indent=1))
    write_new(d / "feedback.md", feedback_md(student, results, notes))


def write_gradebook(out_dir: Path, item_ids: list[str], rows: dict[str, dict[str, float]],
                    isolation: str = "") -> Path:
    """``grades.csv``: student, total, one column per item (in course order); cells that a
    spreadsheet would read as formulas are escaped; ``isolation="none"`` adds a last column
    saying "not isolated" on every row."""
    path = out_dir / "grades.csv"
    if os.path.lexists(path) and not os.path.islink(path) and path.is_file():
        path.unlink()  # merge into an existing shard folder: replace, never write through a link
    buf = io.StringIO()
    w = csv.writer(buf)
    stamp = [NOT_ISOLATED] if isolation == "none" else []
    w.writerow(["student", "total", *item_ids, *stamp])
    for student in sorted(rows):
        scores = rows[student]
        w.writerow([csv_cell(student), f"{sum(scores.values()):g}",
                    *(f"{scores.get(i, 0.0):g}" for i in item_ids), *stamp])
    write_new(path, buf.getvalue())
    return path

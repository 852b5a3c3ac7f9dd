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


def gradescope(
    results: list[ItemResult], notes: list[str] = (), mistakes: dict[str, str] | None = None
) -> dict:
    """Gradescope's results schema: score + one test per item; each test's ``extra_data`` holds
    the status and, where the feedback names one, the mistake's id (``class_report.mistake_id``)."""
    mistakes = mistakes or {}
    return {
        "score": float(sum(r.points for r in results)),
        "tests": [
            {
                "name": r.id,
                "score": float(r.points),
                "max_score": float(r.max_points),
                "status": "passed" if r.passed else "failed",
                "output": f"{r.status}: {r.message}",
                "extra_data": {
                    "status": r.status,
                    **({"mistake": mistakes[r.id]} if r.id in mistakes else {}),
                },
            }
            for r in results
        ],
        "output": "\n".join(notes),
    }


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def feedback_md(student: str, results: list[ItemResult], notes: list[str] = ()) -> str:
    """The student's feedback, by exercise (an item id's prefix, ``ex02`` of ``ex02_attention``):
    first a table with one row per exercise, then each exercise that lost points, its failed items
    with their feedback first and the items passed on one line; the exercises with full marks last,
    on one line. (It was one table of every item: 84 rows, the failures scattered among them.)"""
    total, most = sum(r.points for r in results), sum(r.max_points for r in results)
    groups: dict[str, list[ItemResult]] = {}
    for r in results:
        groups.setdefault(r.id.split("_")[0], []).append(r)
    out = [
        f"# Feedback for {student}",
        "",
        f"**Score: {total:g} / {most:g}**",
        "",
        "| exercise | points | items passed |",
        "|---|---|---|",
    ]
    for ex, rs in groups.items():
        out.append(
            f"| {ex} | {sum(r.points for r in rs):g}/{sum(r.max_points for r in rs):g} | "
            f"{sum(r.passed for r in rs)} of {len(rs)} |"
        )
    for ex, rs in groups.items():
        failed = [r for r in rs if not r.passed]
        if not failed:
            continue
        out += [
            "",
            f"## {ex}: {sum(r.points for r in rs):g}/{sum(r.max_points for r in rs):g} points",
            "",
        ]
        out += [
            f"- **`{r.id}`** (`{r.function}`, {r.points:g}/{r.max_points:g}) — {r.status}: {_md(r.message)}"
            for r in failed
        ]
        passed = [r for r in rs if r.passed]
        if passed:
            out.append(f"- passed: {', '.join(f'`{r.id}`' for r in passed)}")
    complete = [ex for ex, rs in groups.items() if all(r.passed for r in rs)]
    if complete:
        out += ["", f"**Full marks:** {', '.join(complete)}"]
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


NOT_ISOLATED = "not isolated"


def write_student(
    out_dir: Path,
    student: str,
    results: list[ItemResult],
    notes: list[str],
    isolation: str = "",
    mistakes: dict[str, str] | None = None,
    unisolated: str = "graded with --no-isolation (no sandbox)",
) -> None:
    """``OUT/<student>/results.json`` and ``feedback.md``: new files in a new folder, no links
    followed. ``isolation="none"`` stamps "not isolated" and why (``unisolated``) on both."""
    if isolation == "none":
        notes = [f"{NOT_ISOLATED}: {unisolated}", *notes]
    d = out_dir / student
    mkdir_new(d)
    write_new(d / "results.json", json.dumps(gradescope(results, notes, mistakes), indent=1))
    write_new(d / "feedback.md", feedback_md(student, results, notes))


def write_gradebook(
    out_dir: Path, item_ids: list[str], rows: dict[str, dict[str, float]], isolation: str = ""
) -> Path:
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
        w.writerow(
            [
                csv_cell(student),
                f"{sum(scores.values()):g}",
                *(f"{scores.get(i, 0.0):g}" for i in item_ids),
                *stamp,
            ]
        )
    write_new(path, buf.getvalue())
    return path

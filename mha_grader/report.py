"""Results for people and for Gradescope: console lines, feedback.md, results.json, grades.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .compare import ItemResult


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


def gradescope(results: list[ItemResult], notes: list[str] = ()) -> dict:
    """Gradescope's results schema: score + one test per item."""
    return {
        "score": float(sum(r.points for r in results)),
        "tests": [{"name": r.id, "score": float(r.points), "max_score": float(r.max_points),
                   "status": "passed" if r.passed else "failed",
                   "output": f"{r.status}: {r.message}"} for r in results],
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


def write_student(out_dir: Path, student: str, results: list[ItemResult], notes: list[str]) -> None:
    d = out_dir / student
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.json").write_text(json.dumps(gradescope(results, notes), indent=1), encoding="utf-8")
    (d / "feedback.md").write_text(feedback_md(student, results, notes), encoding="utf-8")


def write_gradebook(out_dir: Path, item_ids: list[str], rows: dict[str, dict[str, float]]) -> Path:
    """``grades.csv``: student, total, one column per item (in course order)."""
    path = out_dir / "grades.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "total", *item_ids])
        for student in sorted(rows):
            scores = rows[student]
            w.writerow([student, f"{sum(scores.values()):g}", *(f"{scores.get(i, 0.0):g}" for i in item_ids)])
    return path

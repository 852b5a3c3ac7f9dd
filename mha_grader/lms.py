"""A gradebook (``OUT/grades.csv`` of ``grade`` or ``merge``) in the CSV an LMS imports.

An LMS knows students by its own identifiers, not by submission folder, so every export takes a
roster: a CSV with one row per student, a column naming the submission folder (``match``, by
default ``folder``) and the LMS's own columns. Every graded student must be in it; the ones that
are not are refused by name (their grade would otherwise be silently lost).

- ``canvas``: Canvas's gradebook import CSV: the columns ``Student, ID, SIS User ID, SIS Login ID,
  Section`` (from the roster: the gradebook CSV Canvas exports, Grades > Export, with a ``folder``
  column added, or matched on one of its own columns) and one assignment column, ``Name`` (a new
  assignment) or ``Name (id)`` (Canvas's existing assignment ``id``), then a ``Points Possible``
  row and one row per student. Documented columns: Canvas Instructor Guide "How do I import
  grades in the Gradebook?"; as summarised by Ohio State's guide,
  https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades
  (Student name or ID or SIS User ID, SIS Login ID, Section, Assignment Name), and the export's
  ``Name (id)`` assignment columns: https://nemogb-dev.github.io/nemogb-r/articles/detailed-canvas-export-info.html
- ``moodle``: Moodle's "Import grades / CSV file": any columns, one of which identifies the user
  (email address, username or ID number, chosen as "Map from" / "Map to" on import) and one per
  grade item: https://docs.moodle.org/311/en/Grade_import . Here: the roster's identifier column
  and one grade column.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_IDS = ("Email address", "email", "Username", "username", "ID number", "idnumber")
FORMATS = ("canvas", "moodle")


def read_gradebook(folder: Path) -> tuple[dict[str, float], float, str]:
    """``OUT`` of ``grade``/``merge`` -> (total per student folder, points possible, what was
    graded: the assignment's exercises or "all exercises"); ``ValueError`` naming what is wrong."""
    from mha_grader.registry import all_items

    try:
        with open(folder / "grades.csv", newline="", encoding="utf-8") as f:
            totals = {r["student"]: float(r["total"]) for r in csv.DictReader(f)}
        meta = json.loads((folder / "grading.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(
            f"gradebook: expected the OUT folder of `mha-course grade` or `merge` (grades.csv "
            f"and grading.json), got {str(folder)!r} ({type(e).__name__}: {e})"
        ) from None
    items = set(meta.get("items", []))
    possible = sum(it.points for it in all_items() if it.id in items)
    what = meta.get("assignment", "all exercises")
    if isinstance(what, list):
        what = ",".join(stem.split("_")[0] for stem in what)
    return totals, float(possible), str(what)


def read_roster(path: Path, match: str) -> list[dict[str, str]]:
    """The roster's student rows (a Canvas export's ``Points Possible`` row skipped); refuses a
    roster without the ``match`` column or with a folder named twice."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"--roster: cannot read {str(path)!r} ({type(e).__name__}: {e})") from None
    columns = list(rows[0]) if rows else []
    if match not in columns:
        raise ValueError(
            f"--roster: expected a CSV with a {match!r} column (the submission folder of each "
            f"student; --match names another column), got the columns {columns} in {str(path)!r}"
        )
    rows = [r for r in rows if (r.get("Student") or "").strip() != CANVAS_POINTS_ROW]
    seen: dict[str, int] = {}
    for r in rows:
        seen[r[match]] = seen.get(r[match], 0) + 1
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        raise ValueError(f"--roster: {match!r} names these folders more than once: {twice}")
    return rows


def export(
    totals: dict[str, float],
    possible: float,
    roster: list[dict[str, str]],
    fmt: str,
    *,
    match: str = "folder",
    column: str = "mha-course",
    id_column: str | None = None,
) -> tuple[str, list[str]]:
    """The import CSV for ``fmt`` and the roster's folders that have no grade (left out, so the
    LMS keeps what it has for them). Refuses graded students missing from the roster, by name."""
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    by_folder = {r[match]: r for r in roster}
    missing = sorted(set(totals) - set(by_folder))
    if missing:
        raise ValueError(
            f"--roster: {len(missing)} graded student(s) have no row in the roster (column "
            f"{match!r}), so the LMS could not tell who they are: {missing}"
        )
    columns = list(roster[0]) if roster else []
    if fmt == "canvas":
        need = [c for c in CANVAS_COLUMNS if c not in columns]
        if need:
            raise ValueError(
                f"--roster: Canvas's import needs the columns {list(CANVAS_COLUMNS)} (its "
                f"gradebook export has them); the roster lacks {need}"
            )
        head = [*CANVAS_COLUMNS, column]
        body = [[CANVAS_POINTS_ROW, "", "", "", "", f"{possible:g}"]]
        keep = list(CANVAS_COLUMNS)
    else:
        ident = id_column or next((c for c in MOODLE_IDS if c in columns), None)
        if ident is None or ident not in columns:
            raise ValueError(
                f"--id-column: Moodle maps users by email address, username or ID number; expected "
                f"one of {list(MOODLE_IDS)} in the roster (or --id-column naming one), got "
                f"{id_column!r} and the columns {columns}"
            )
        head, body, keep = [ident, column], [], [ident]
    for folder in sorted(by_folder):
        if folder in totals:
            body.append([by_folder[folder][c] for c in keep] + [f"{totals[folder]:g}"])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([head, *body])
    return buf.getvalue(), sorted(set(by_folder) - set(totals))

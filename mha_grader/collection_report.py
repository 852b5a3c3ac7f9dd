"""What the class grader writes about collecting the notebooks: ``OUT/collection.csv`` (per
student and exercise, what was graded from which file, and every file ignored and why) and the
class-wide counts in ``grading.json`` (``collect.py`` finds the notebooks).
"""

from __future__ import annotations

from pathlib import Path

from mha_grader.collect import COMPETING, FOUND, Collected, summary_rows
from mha_grader.outputs import csv_cell, write_new

COLLECTION_HEADER = ["student", "exercise", "status", "file", "rule or reason"]


def write_collection(out: Path, collected: dict[str, Collected]) -> None:
    """``OUT/collection.csv``: per student and exercise what was graded from which file (status
    taken / found / competing / missing), then every file that was ignored and why."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLLECTION_HEADER)
    for s in sorted(collected):
        for row in summary_rows(s, collected[s]):
            w.writerow([csv_cell(c) for c in row])
    write_new(out / "collection.csv", buf.getvalue())


def collection_counts(collected: dict[str, Collected]) -> dict[str, int]:
    """Class-wide: notebooks found under another name or folder, exercises where different files
    competed, files ignored."""
    return {
        "found elsewhere": sum(st == FOUND for c in collected.values() for st in c.status.values()),
        "competing": sum(st == COMPETING for c in collected.values() for st in c.status.values()),
        "ignored files": sum(len(c.ignored) for c in collected.values()),
    }

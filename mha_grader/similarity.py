"""Copies across a class: each exercise's code, student <-> student and student <-> references.

The comparison is copydetect's (https://github.com/blingenf/copydetect: winnowed k-gram
fingerprints of the tokenized code, so renamed variables and moved whitespace do not hide a
copy), not a hand-written one. Per exercise, each student's code is the code cells of the
notebook the course's collector takes (``collect.py``: content and name, anywhere in the
folder); the references are given by the caller (the published solutions, the package's
source); the given code (the exercise's stub notebook) is boilerplate, so matching what every
student was handed counts for nothing.

The notebooks are read here, in this process, but nothing of them runs: a file over
``MAX_BYTES`` or not JSON is skipped with a note. Scores are copydetect's: for a pair (a, b),
the share of a's fingerprinted code found in b, and of b's in a.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 8 * 2**20
STUDENT, SOLUTION, PACKAGE = "student", "published solution", "package source"


class MissingLibrary(RuntimeError):
    """copydetect is not installed."""


def _copydetect():
    try:
        import copydetect
    except ImportError:
        raise MissingLibrary(
            "mha-course similarity needs copydetect: pip install 'mha-course[instructor]' "
            "(or pip install copydetect)"
        ) from None
    return copydetect


def notebook_code(path: Path) -> str | None:
    """The code cells of a notebook, one after another; None if it cannot be read as one."""
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return None
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError):
        return None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        return None
    out = []
    for c in cells:
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            src = "".join(s for s in src if isinstance(s, str)) if isinstance(src, list) else src
            if isinstance(src, str):
                out.append(src)
    return "\n\n".join(out) + "\n"


@dataclass
class Pair:
    exercise: str
    a: str
    b: str
    kind: str  # "student", "published solution" or "package source": what b is
    share_a: float  # of a's code, the share found in b
    share_b: float
    tokens: int


def compare_exercise(
    exercise: str,
    students: dict[str, str],
    references: dict[str, tuple[str, str]],
    given: str,
    work: Path,
    threshold: float,
) -> tuple[list[Pair], Path | None]:
    """``students``: name -> code; ``references``: name -> (kind, code); ``given``: the stub's code.
    Writes the code files under ``work/exercise/`` and copydetect's page with the matching regions
    (``work/<exercise>.html``); returns every pair of which either share reaches ``threshold``."""
    cd = _copydetect()
    root = work / exercise
    folders = {name: root / name for name in ("students", "references", "given")}
    for d in folders.values():
        d.mkdir(parents=True)
    names: dict[str, tuple[str, str]] = {}  # file -> (name, kind)
    for s, code in sorted(students.items()):  # names checked by outputs.check_student_name
        f = folders["students"] / f"{s}.py"
        f.write_text(code, encoding="utf-8")
        names[str(f)] = (s, STUDENT)
    for r, (kind, code) in sorted(references.items()):
        f = folders["references"] / (re.sub(r"[^\w.-]+", "_", r) + ".py")
        f.write_text(code, encoding="utf-8")
        names[str(f)] = (r, kind)
    (folders["given"] / "given.py").write_text(given, encoding="utf-8")
    if len(students) == 0:
        return [], None
    logging.getLogger().setLevel(logging.ERROR)  # copydetect warns about every empty folder
    det = cd.CopyDetector(
        test_dirs=[str(folders["students"])],
        ref_dirs=[str(folders["students"]), str(folders["references"])],
        boilerplate_dirs=[str(folders["given"])],
        extensions=["py"],
        display_t=threshold,
        autoopen=False,
        silent=True,
        out_file=str(work / f"{exercise}.html"),
    )
    det.run()
    pairs, seen = [], set()
    if len(det.similarity_matrix):
        for i, tf in enumerate(det.test_files):
            for j, rf in enumerate(det.ref_files):
                sa, sb = (float(x) for x in det.similarity_matrix[i, j])
                if sa < 0 or max(sa, sb) < threshold:
                    continue
                key = frozenset((tf, rf))
                if key in seen:
                    continue
                seen.add(key)
                (a, _), (b, kind) = names[tf], names[rf]
                if kind == STUDENT and b < a:  # one order for a pair of students
                    a, b, sa, sb = b, a, sb, sa
                pairs.append(
                    Pair(exercise, a, b, kind, sa, sb, int(det.token_overlap_matrix[i, j]))
                )
        if pairs:
            det.generate_html_report()
    return sorted(pairs, key=lambda p: (-max(p.share_a, p.share_b), p.a, p.b)), (
        work / f"{exercise}.html" if pairs else None
    )


def _link(out: Path, page: Path | None) -> str:
    return (
        f"<a href='{html.escape(page.relative_to(out).as_posix())}'>matching regions</a>"
        if page
        else ""
    )


def write_outputs(
    out: Path,
    pairs: list[Pair],
    pages: dict[str, Path | None],
    notes: list[str],
    counts: dict[str, int],
    threshold: float,
) -> None:
    """``OUT/similarity.csv`` (every pair over the threshold) and ``OUT/similarity.html``."""
    from mha_grader.outputs import csv_cell, write_new

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "exercise",
            "student",
            "other",
            "other_kind",
            "share_of_student",
            "share_of_other",
            "tokens",
            "regions_page",
        ]
    )
    for p in pairs:
        page = pages.get(p.exercise)
        w.writerow(
            [
                p.exercise,
                csv_cell(p.a),
                csv_cell(p.b),
                p.kind,
                f"{p.share_a:.3f}",
                f"{p.share_b:.3f}",
                p.tokens,
                page.relative_to(out).as_posix() if page else "",
            ]
        )
    write_new(out / "similarity.csv", buf.getvalue())
    e = html.escape
    rows = [
        f"<tr><td>{e(p.exercise)}</td><td>{e(p.a)}</td><td>{e(p.b)}</td><td>{e(p.kind)}</td>"
        f"<td>{p.share_a:.0%}</td><td>{p.share_b:.0%}</td><td>{p.tokens}</td>"
        f"<td>{_link(out, pages.get(p.exercise))}</td></tr>"
        for p in pairs
    ]
    page = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Similarity</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px}</style></head><body><h1>Similarity</h1>",
        f"<p>Pairs whose copydetect score reaches {threshold:.0%} (the share of one side's code found in "
        f"the other; the code every student was given does not count). Each exercise's page shows the "
        f"matching regions. A high score is a reason to look, not a verdict.</p>",
        "<p>"
        + ", ".join(f"{e(ex)}: {n} student notebook(s)" for ex, n in sorted(counts.items()))
        + "</p>",
        "<table><tr><th>exercise</th><th>student</th><th>other</th><th>other is</th><th>of student's code</th>"
        "<th>of other's code</th><th>tokens</th><th></th></tr>",
        *rows,
        "</table>",
    ]
    if not pairs:
        page.append("<p>No pair reaches the threshold.</p>")
    if notes:
        page += ["<h2>Notes</h2><ul>", *(f"<li>{e(n)}</li>" for n in notes), "</ul>"]
    write_new(out / "similarity.html", "\n".join(page + ["</body></html>"]) + "\n")

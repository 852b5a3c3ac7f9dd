"""The class at a glance: ``OUT/class_report.{json,csv,html}``, ``class_mistakes.csv``,
``class_items.csv`` and ``class_totals.png`` from a graded (or merged) ``OUT`` folder.

Per item: how many students handed it in and passed it (pass rate), the count of each status and
of each **named mistake**; per exercise the most common mistakes; the distribution of totals (a
histogram) and the grading time per student. Mistakes have stable machine-readable ids: the
mistake's name in the course's items (``mha_course/grading/chapters/chNN.py``) in lower case with
``_`` for anything else (``"mask after softmax"`` -> ``mask_after_softmax``); ``results.json``
carries it per test under ``extra_data.mistake`` (with ``extra_data.status``), and
``class_items.csv`` has one row per student and item with both.

Everything is read back from the folder's own files (``grading.json``, each student's
``results.json``), so ``mha-course report OUT`` works on a merged gradebook too. Student names
are escaped in the page (they are untrusted folder names).
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
from pathlib import Path

from mha_grader.compare import ItemResult, mistake_text
from mha_grader.items import Item
from mha_grader.outputs import csv_cell, write_new

FILES = (
    "class_report.json",
    "class_report.csv",
    "class_mistakes.csv",
    "class_items.csv",
    "class_report.html",
    "class_totals.png",
)
TOP = 5  # mistakes listed per exercise


_INHERITS = re.compile(r"inherits the failure of [^(]*\(([A-Za-z0-9_]+): ")


def mistake_id(name: str) -> str:
    """``"mask after softmax"`` -> ``"mask_after_softmax"`` (stable while the name is)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def tag_mistakes(items: dict[str, Item], results: list[ItemResult]) -> dict[str, str]:
    """Item id -> the id of the named mistake its feedback names (longest match), for the failed
    results whose feedback names one; ``inherits_<earlier item>`` for an item that inherits an
    earlier item's failure (``causes.INHERITS``)."""
    out = {}
    for r in results:
        item = items.get(r.id)
        if item is None or r.passed or not r.message:
            continue
        inherited = _INHERITS.match(r.message)
        if inherited:  # the earlier failure is the cause (causes.INHERITS): counted as that
            out[r.id] = f"inherits_{mistake_id(inherited.group(1))}"
            continue
        hits = [
            (len(mistake_text(m)), mistake_id(m.name))
            for m in item.mistakes
            if mistake_text(m) in r.message
        ]
        if hits:
            out[r.id] = max(hits)[1]
    return out


def _replace(path: Path, data: str | bytes) -> None:
    """A new file at ``path`` (a regular file there is replaced; a link is never followed)."""
    if os.path.lexists(path) and not os.path.islink(path) and path.is_file():
        path.unlink()
    if isinstance(data, str):
        write_new(path, data)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    for row in rows:
        w.writerow([csv_cell(c) if isinstance(c, str) else c for c in row])
    return buf.getvalue()


def _status(test: dict) -> str:
    extra = test.get("extra_data") if isinstance(test.get("extra_data"), dict) else {}
    return str(
        extra.get("status") or str(test.get("output", "")).split(":")[0] or test.get("status", "")
    )


def build(out: Path, items: dict[str, Item]) -> dict:
    """The report's numbers, from ``out``'s files."""
    meta = json.loads((out / "grading.json").read_text(encoding="utf-8"))
    ids = list(meta["items"])
    per_item = {
        i: {
            "item": i,
            "exercise": items[i].notebook if i in items else i.split("_")[0],
            "max_points": float(items[i].points) if i in items else 0.0,
            "students": 0,
            "handed_in": 0,
            "passed": 0,
            "points": 0.0,
            "statuses": {},
            "mistakes": {},
        }
        for i in ids
    }
    totals, rows = {}, []
    for s in meta["students"]:
        path = out / s / "results.json"
        if not path.is_file() or path.is_symlink():  # a reserved name: a row, no folder
            continue
        res = json.loads(path.read_text(encoding="utf-8"))
        totals[s] = float(res.get("score", 0.0))
        for t in res.get("tests", []):
            st = per_item.get(t.get("name"))
            if st is None:
                continue
            status = _status(t)
            extra = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
            mistake = str(extra.get("mistake", ""))
            st["students"] += 1
            st["handed_in"] += status not in ("missing notebook", "rejected")
            st["passed"] += t.get("status") == "passed"
            st["points"] += float(t.get("score", 0.0))
            st["statuses"][status] = st["statuses"].get(status, 0) + 1
            if mistake:
                st["mistakes"][mistake] = st["mistakes"].get(mistake, 0) + 1
            rows.append(
                [
                    s,
                    t["name"],
                    st["exercise"],
                    f"{float(t.get('score', 0)):g}",
                    f"{float(t.get('max_score', 0)):g}",
                    status,
                    mistake,
                ]
            )
    for st in per_item.values():
        n = st["students"]
        st["pass_rate"] = st["passed"] / n if n else 0.0
        st["pass_rate_handed_in"] = st["passed"] / st["handed_in"] if st["handed_in"] else 0.0
        st["mean_points"] = st["points"] / n if n else 0.0
        del st["points"]
    texts = {(i, mistake_id(m.name)): m.feedback for i, it in items.items() for m in it.mistakes}
    exercises: dict[str, list] = {}
    for st in per_item.values():
        for m, c in st["mistakes"].items():
            exercises.setdefault(st["exercise"], []).append(
                {
                    "item": st["item"],
                    "mistake": m,
                    "count": c,
                    "share_handed_in": c / st["handed_in"] if st["handed_in"] else 0.0,
                    "feedback": texts.get((st["item"], m), ""),
                }
            )
    for ex in exercises.values():
        ex.sort(key=lambda e: (-e["count"], e["item"], e["mistake"]))
    most = sum(st["max_points"] for st in per_item.values())
    seconds = meta.get("seconds", {})
    return {
        "students": len(meta["students"]),
        "max_total": most,
        "assignment": meta.get("assignment"),
        "items": list(per_item.values()),
        "most_common_mistakes": exercises,
        "totals": totals,
        "seconds_per_student": {s: seconds[s] for s in sorted(seconds)},
        "_rows": rows,
    }


def _plot(totals: list[float], most: float) -> bytes | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    bins = max(1, min(20, int(most) or 1))
    ax.hist(totals, bins=bins, range=(0, most or 1), color="#4a7ab5", edgecolor="white")
    ax.set_xlabel(f"total points (of {most:g})")
    ax.set_ylabel("students")
    ax.set_title(f"Distribution of totals ({len(totals)} students)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _page(rep: dict, png: bool) -> str:
    e = html.escape
    pct = "{:.0%}".format
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Class report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}</style></head><body>",
        f"<h1>Class report</h1><p>{rep['students']} student(s); totals out of {rep['max_total']:g}.</p>",
    ]
    if png:
        out.append(
            "<h2>Distribution of totals</h2><img src='class_totals.png' alt='histogram of totals'>"
        )
    out.append("<h2>Most common mistakes per exercise</h2>")
    for ex, ms in sorted(rep["most_common_mistakes"].items()):
        out.append(
            f"<h3>{e(ex)}</h3><table><tr><th>item</th><th>mistake</th><th>students</th>"
            "<th>of those who handed it in</th><th>feedback</th></tr>"
        )
        for m in ms[:TOP]:
            out.append(
                f"<tr><td>{e(m['item'])}</td><td><code>{e(m['mistake'])}</code></td>"
                f"<td class=n>{m['count']}</td><td class=n>{pct(m['share_handed_in'])}</td>"
                f"<td>{e(m['feedback'])}</td></tr>"
            )
        out.append("</table>")
    if not rep["most_common_mistakes"]:
        out.append("<p>No named mistake in this class.</p>")
    out.append(
        "<h2>Items</h2><table><tr><th>item</th><th>points</th><th>handed in</th><th>passed</th>"
        "<th>pass rate</th><th>of those who handed it in</th><th>statuses</th></tr>"
    )
    for st in rep["items"]:
        statuses = ", ".join(
            f"{e(k)}: {v}" for k, v in sorted(st["statuses"].items(), key=lambda kv: -kv[1])
        )
        out.append(
            f"<tr><td>{e(st['item'])}</td><td class=n>{st['max_points']:g}</td>"
            f"<td class=n>{st['handed_in']}</td><td class=n>{st['passed']}</td>"
            f"<td class=n>{pct(st['pass_rate'])}</td><td class=n>{pct(st['pass_rate_handed_in'])}</td>"
            f"<td>{statuses}</td></tr>"
        )
    out.append(
        "</table><h2>Students</h2><table><tr><th>student</th><th>total</th><th>grading time (s)</th></tr>"
    )
    for s, total in sorted(rep["totals"].items()):
        sec = rep["seconds_per_student"].get(s)
        out.append(
            f"<tr><td>{e(s)}</td><td class=n>{total:g}</td>"
            f"<td class=n>{'' if sec is None else f'{sec:.1f}'}</td></tr>"
        )
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def write_class_report(out: Path, items: dict[str, Item]) -> dict:
    """Write the report's files into ``out`` (replacing earlier ones); return its numbers."""
    rep = build(out, items)
    rows = rep.pop("_rows")
    _replace(out / "class_report.json", json.dumps(rep, indent=1))
    _replace(
        out / "class_report.csv",
        _csv(
            [
                [
                    "item",
                    "exercise",
                    "max_points",
                    "students",
                    "handed_in",
                    "passed",
                    "pass_rate",
                    "pass_rate_handed_in",
                    "mean_points",
                    "statuses",
                    "mistakes",
                ]
            ]
            + [
                [
                    st["item"],
                    st["exercise"],
                    f"{st['max_points']:g}",
                    st["students"],
                    st["handed_in"],
                    st["passed"],
                    f"{st['pass_rate']:.4f}",
                    f"{st['pass_rate_handed_in']:.4f}",
                    f"{st['mean_points']:.4g}",
                    ";".join(f"{k}={v}" for k, v in sorted(st["statuses"].items())),
                    ";".join(f"{k}={v}" for k, v in sorted(st["mistakes"].items())),
                ]
                for st in rep["items"]
            ]
        ),
    )
    _replace(
        out / "class_mistakes.csv",
        _csv(
            [["exercise", "item", "mistake", "count", "share_handed_in", "feedback"]]
            + [
                [
                    ex,
                    m["item"],
                    m["mistake"],
                    m["count"],
                    f"{m['share_handed_in']:.4f}",
                    m["feedback"],
                ]
                for ex, ms in sorted(rep["most_common_mistakes"].items())
                for m in ms
            ]
        ),
    )
    _replace(
        out / "class_items.csv",
        _csv([["student", "item", "exercise", "points", "max_points", "status", "mistake"]] + rows),
    )
    png = _plot(list(rep["totals"].values()), rep["max_total"])
    if png is not None:
        _replace(out / "class_totals.png", png)
    _replace(out / "class_report.html", _page(rep, png is not None))
    return rep

"""Join the gradebooks of several class-grading runs into one (``mha-course merge``).

``merge`` joins shard folders (``grade_class(shard=(k, n))``: each with ``grading.json`` and its
students' results) into one gradebook, or, with ``replace``, puts a regrade of some students into
a whole gradebook and lists every item whose points changed. It refuses (``MergeRefused``)
folders that do not make one gradebook: a shard missing or given twice (``check_complete``),
other inputs or other items (``check_consistent``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mha_grader.class_report import write_class_report
from mha_grader.collection_report import COLLECTION_HEADER
from mha_grader.outputs import check_student_name, csv_cell, fresh_folder, mkdir_new, write_new
from mha_grader.registry import all_items
from mha_grader.report import write_gradebook

_INPUT_KEYS = ("inputs", "key_fingerprint", "seed", "submission")


def _copy_regular(src: Path, dest: Path) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as f:
        write_new(dest, f.read())


class MergeRefused(ValueError):
    """The shard folders do not make one gradebook (a missing shard, other inputs, other items)."""


def _meta(part: Path) -> dict:
    path = part / "grading.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MergeRefused(
            f"{part}: expected an OUT folder of `mha-course grade` (with grading.json), "
            f"but {path} could not be read ({type(e).__name__})"
        ) from None


def _inputs(meta: dict) -> str:
    return json.dumps({k: meta[k] for k in _INPUT_KEYS if k in meta}, sort_keys=True)


def _describe_inputs(meta: dict) -> str:
    if meta.get("inputs") == "secret key":
        sub = f", submission id {meta['submission']!r}" if meta.get("submission") else ""
        return f"key {meta.get('key_fingerprint')}{sub}"
    if meta.get("inputs") == "public seed":
        return f"public seed {meta.get('seed')}"
    return str(meta.get("inputs", "unknown inputs"))


def check_consistent(parts: list[Path], metas: list[dict]) -> None:
    """Every folder graded the same items on the same inputs (one key, one submission id)."""
    if len({_inputs(m) for m in metas}) > 1:
        what = "; ".join(f"{p}: {_describe_inputs(m)}" for p, m in zip(parts, metas))
        raise MergeRefused(
            f"the folders were graded on different inputs ({what}); a gradebook must "
            f"come from one key: regrade with the same --key-file"
        )
    for p, m in zip(parts[1:], metas[1:]):
        if m.get("items") != metas[0].get("items"):
            raise MergeRefused(
                f"{p} graded other items than {parts[0]} (another --assignment or "
                f"course version); regrade them alike"
            )
        if m.get("policy") != metas[0].get("policy"):
            raise MergeRefused(
                f"{p} was graded under another version of the items than {parts[0]} (policy "
                f"{m.get('policy', 'not recorded')} against {metas[0].get('policy', 'not recorded')}: "
                "their cases, forbidden lists, points or tolerances differ), so its students "
                "were judged differently; regrade every folder with one version of the course"
            )


def check_complete(parts: list[Path], metas: list[dict]) -> None:
    """The shards are exactly 1/N ... N/N of one class, each once."""
    seen: dict[int, Path] = {}
    for p, m in zip(parts, metas):
        if "only students" in m:
            raise MergeRefused(
                f"{p} graded only some students (--students {','.join(m['only students'])}): "
                f"put a regrade into a gradebook with --replace"
            )
    ns = {int(m.get("shard", [1, 1])[1]) for m in metas}
    if len(ns) > 1:
        raise MergeRefused(
            "the folders are shards of different splits: "
            + ", ".join(
                f"{p} is {'/'.join(map(str, m.get('shard', [1, 1])))}" for p, m in zip(parts, metas)
            )
        )
    n = ns.pop()
    for p, m in zip(parts, metas):
        k = int(m.get("shard", [1, 1])[0])
        if k in seen:
            raise MergeRefused(f"shard {k}/{n} is given twice: {seen[k]} and {p}")
        seen[k] = p
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in seen]
    if missing:
        raise MergeRefused(
            f"incomplete shard set: got {len(seen)} of {n} shard(s); missing "
            f"{', '.join(missing)} (grade it with the same --key-file, or pass its folder; "
            f"to put a regrade of some students into a gradebook, use --replace)"
        )


def _scores(part: Path, student: str) -> dict[str, float]:
    res = json.loads((part / student / "results.json").read_text(encoding="utf-8"))
    return {t["name"]: float(t["score"]) for t in res["tests"]}


def _replace_file(path: Path, text: str) -> None:
    if os.path.lexists(path) and not os.path.islink(path) and path.is_file():
        path.unlink()
    write_new(path, text)


def _collection_rows(part: Path, students: set[str]) -> list[list[str]]:
    import csv

    path = part / "collection.csv"
    if not path.is_file() or path.is_symlink():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    cells = {csv_cell(s) for s in students}  # the file holds the escaped names
    return [r for r in rows if r and r[0] in cells]


def merge(parts: list[Path], out: Path, replace: bool = False) -> dict[str, dict[str, float]]:
    """Join shard folders (each with grading.json and per-student results) into one gradebook.

    Refused (``MergeRefused``): a shard missing or given twice, folders graded on different
    inputs (another key or submission id) or other items. ``replace``: ``parts[0]`` is a whole
    gradebook and each later folder a regrade of some of its students (same key, same items),
    whose rows replace theirs; ``OUT`` (a new folder) gets ``changes.csv``, every item whose
    points changed, and ``grading.json`` records it under ``replaced``.
    """
    import csv
    import io

    metas = [_meta(p) for p in parts]
    check_consistent(parts, metas)
    if replace:
        if len(parts) < 2:
            raise MergeRefused(
                "--replace: expected the gradebook and at least one regrade folder, "
                f"got {len(parts)} folder"
            )
        check_complete(parts[:1], metas[:1])  # the gradebook itself: a whole class
        if any(p.resolve() == out.resolve() for p in parts):
            raise MergeRefused(
                f"--replace: --out {out} must be a new folder, not one of the inputs"
            )
        fresh_folder(out)
    else:
        check_complete(parts, metas)
        out.mkdir(parents=True, exist_ok=True)
    ids = metas[0]["items"]
    source: dict[str, Path] = {}
    for part, meta in zip(parts, metas):
        for s in meta["students"]:
            if s in source and not replace:
                raise MergeRefused(f"{part}: student {s!r} is in two shards")
            source[s] = part  # with --replace, a later folder's row wins
    rows: dict[str, dict[str, float]] = {}
    changes: list[list[str]] = []
    replaced: dict[str, dict] = {}
    for s, part in sorted(source.items()):
        if check_student_name(s) is not None:
            rows[s] = {}
            continue
        rows[s] = _scores(part, s)
        if replace and part != parts[0]:
            before = (
                _scores(parts[0], s)
                if s in metas[0]["students"]
                and check_student_name(s) is None
                and (parts[0] / s / "results.json").is_file()
                else None
            )
            changed = [
                i for i in ids if before is None or before.get(i, 0.0) != rows[s].get(i, 0.0)
            ]
            for i in changed:
                changes.append(
                    [
                        csv_cell(s),
                        i,
                        "" if before is None else f"{before.get(i, 0.0):g}",
                        f"{rows[s].get(i, 0.0):g}",
                        str(part),
                    ]
                )
            replaced[s] = {
                "from": str(part),
                "items changed": len(changed),
                "total before": None if before is None else sum(before.values()),
                "total after": sum(rows[s].values()),
            }
        if part.resolve() != out.resolve():
            mkdir_new(out / s)
            for name in ("results.json", "feedback.md"):
                _copy_regular(part / s / name, out / s / name)
    modes = set()
    for meta in metas:  # a shard says its mode; a merged gradebook lists its shards' modes
        got = meta.get("isolation", "unknown")
        modes.update([got] if isinstance(got, str) else map(str, got))
    unisolated = any(m.startswith("none") for m in modes)
    write_gradebook(out, ids, rows, "none" if unisolated else "")
    collection = []
    for part in parts:
        collection += _collection_rows(part, {s for s, p in source.items() if p == part})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLLECTION_HEADER)
    w.writerows(sorted(collection))
    _replace_file(out / "collection.csv", buf.getvalue())
    meta_out = {
        **json.loads(_inputs(metas[0])),
        "shard": [1, 1],
        "students": sorted(rows),
        "items": ids,
        **({"policy": metas[0]["policy"]} if "policy" in metas[0] else {}),
        "assignment": metas[0].get("assignment", "all exercises"),
        "isolation": sorted(modes),
        "merged_from": [str(p) for p in parts],
    }
    meta_out["seconds"] = {
        s: float(m.get("seconds", {})[s])
        for s, part in sorted(source.items())
        for p, m in zip(parts, metas)
        if p == part and s in m.get("seconds", {})
    }
    if replace:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["student", "item", "before", "after", "regraded in"])
        w.writerows(changes)
        write_new(out / "changes.csv", buf.getvalue())
        meta_out["replaced"] = replaced
    _replace_file(out / "grading.json", json.dumps(meta_out, indent=1))
    write_class_report(out, {it.id: it for it in all_items() if it.id in set(ids)})
    return rows

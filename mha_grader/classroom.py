"""Grade a class: ``SUBMISSIONS/<student>/exNN_<topic>.ipynb`` -> ``OUT/`` gradebook.

Work units are students: each student's notebooks are graded in one sandboxed child (a fresh
one after a crash or a timeout); threads only wait on the children, so ``workers`` children run
at once. ``shard=(k, n)`` grades the students
whose position in the sorted list is ``k - 1`` modulo ``n``; ``merge`` joins shard folders.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mha_grader import compare as C
from mha_grader.class_report import tag_mistakes, write_class_report
from mha_grader.collect import COMPETING, FOUND, Collected, collect, summary_rows
from mha_grader.errors import IsolationUnavailable
from mha_grader.keys import StudentInputs, fingerprint
from mha_grader.outputs import (
    check_notebook,
    check_student_folder,
    check_student_name,
    collisions,
    csv_cell,
    fresh_folder,
    mkdir_new,
    write_new,
)
from mha_grader.registry import all_items, notebooks
from mha_grader.report import write_gradebook, write_student
from mha_grader.runner import grade_submission
from mha_grader.sandbox import cgroup, confine, isolation
from mha_grader.sandbox.launch import Limits

_INPUT_KEYS = ("inputs", "key_fingerprint", "seed", "submission")


def _inputs_meta(key: bytes | None, seed: int | None, submission: str) -> dict:
    """What grading.json says about the inputs: never the key, only its fingerprint."""
    if key is not None:
        return {
            "inputs": "secret key",
            "key_fingerprint": fingerprint(key),
            "submission": submission,
        }
    return {"inputs": "public seed", "seed": seed}


def students(submissions: Path, shard: tuple[int, int] = (1, 1)) -> list[str]:
    """The student folders of this shard (sorted by name, every n-th from k - 1); entries that
    are not folders (a stray file) are ignored, folders that are links are kept (and refused)."""
    k, n = shard
    if not 1 <= k <= n:
        raise ValueError(f"shard: expected K/N with 1 <= K <= N, got {k}/{n}")
    names = sorted(
        p.name
        for p in submissions.iterdir()
        if (p.is_dir() or p.is_symlink()) and not p.name.startswith(".")
    )
    return names[k - 1 :: n]


def _zero(items, status: str, message: str) -> list[C.ItemResult]:
    return [C.ItemResult(it.id, it.function, 0.0, it.points, status, message) for it in items]


def grade_class(
    submissions: Path,
    out: Path,
    *,
    workers: int = 2,
    key: bytes | None = None,
    seed: int | None = None,
    submission: str = "",
    limits: Limits | None = None,
    shard: tuple[int, int] = (1, 1),
    progress: bool = True,
    no_isolation: bool = False,
    isolation_mode: str | None = None,
    assignment: list[str] | None = None,
    only: list[str] | None = None,
    own_ci: bool = False,
) -> dict[str, dict[str, float]]:
    """Grade every student of the shard; write ``OUT/<student>/`` files and ``OUT/grades.csv``.

    Inputs: with ``key`` (the secret run key, see ``keys.py``) each student gets their own inputs,
    from HMAC(key, student, item, ``submission``); with only ``seed``, every student gets the same
    PUBLIC inputs (for a student's own CI, where no secret can be kept).

    Isolation: the strongest available (``isolation.choose``); ``IsolationUnavailable`` (saying
    how to get some) when there is none, unless ``no_isolation`` (then every output says "not
    isolated"), or ``own_ci``: a student's own CI on PUBLIC inputs (``seed`` only; refused with a
    ``key``), graded without a sandbox where none can start (e.g. GitHub's runner: not root, no
    user namespaces), and every output says so. ``assignment`` (notebook stems): grade only those exercises; items, totals,
    columns and feedback are theirs alone. ``only`` (student folder names): grade just those (a
    regrade; ``grading.json`` says so and ``merge`` takes it only with ``replace``). ``OUT`` must
    be new or empty. Refused layouts (a student folder that is a link,
    a hard-linked or symlinked notebook, a reserved or odd name) get status "rejected".
    """
    from tqdm.auto import tqdm

    if (key is None) == (seed is None):
        raise ValueError(
            "grade_class: give exactly one of key (secret inputs) or seed (public inputs)"
        )

    def inputs(student: str):
        return StudentInputs(key, student, submission) if key is not None else int(seed)

    if own_ci and key is not None:
        raise ValueError(
            "--own-ci grades a student's own code on PUBLIC inputs (--seed S) and never with a "
            "secret key; got a key (--key-file). Grade a class without --own-ci"
        )
    mode, unisolated = "none", "graded with --no-isolation (no sandbox)"
    if own_ci and not no_isolation:
        try:
            mode = isolation.choose(isolation_mode, allow_none=False)
        except IsolationUnavailable:
            why = "; ".join(filter(None, (isolation.bwrap_problem(), isolation.user_problem())))
            unisolated = f"a student's own CI on PUBLIC inputs (--own-ci); no sandbox here: {why}"
    elif not no_isolation:
        mode = isolation.choose(isolation_mode, allow_none=False)
    limits, control = resource_control(limits or Limits(), workers)
    fresh_folder(out)
    books = notebooks()
    if assignment is not None:
        unknown = sorted(set(assignment) - set(books))
        if unknown or not assignment:
            raise ValueError(
                f"assignment: expected exercise notebook stems of the course, got {unknown or 'none'}"
            )
        books = {stem: items for stem, items in books.items() if stem in assignment}
    who = students(submissions, shard)
    if only is not None:
        unknown = sorted(set(only) - set(who))
        if unknown or not only:
            raise ValueError(
                f"--students: expected student folders of {submissions}"
                f"{' in this shard' if shard != (1, 1) else ''}, got {unknown or only}"
            )
        who = [s for s in who if s in only]
    jobs, results, rejected = {}, {s: {} for s in who}, {}
    collected: dict[str, Collected] = {}
    clash = collisions(who)
    for s in who:
        why = check_student_name(s) or clash.get(s) or check_student_folder(submissions / s)
        got = collected[s] = Collected() if why else collect(submissions / s, books)
        for stem, items in books.items():
            path = got.taken.get(stem)
            bad = why or (check_notebook(path) if path is not None else None)
            if bad:
                rejected.setdefault(s, []).append(bad if why else f"{got.source[stem]}: {bad}")
                results[s][stem] = (_zero(items, C.REJECTED, bad), [])
            elif path is not None:
                jobs.setdefault(s, {})[stem] = path
            else:
                results[s][stem] = (
                    _zero(
                        items,
                        C.MISSING_NOTEBOOK,
                        f"no {stem}.ipynb handed in (no notebook in the folder is "
                        f"{stem.split('_')[0]}'s by its cells or its name)",
                    ),
                    [],
                )
    seconds: dict[str, float] = {}

    def timed(s: str, paths: dict[str, Path]):
        start = time.perf_counter()
        try:
            return grade_submission(paths, books, inputs(s), limits, mode)
        finally:
            seconds[s] = round(time.perf_counter() - start, 2)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(timed, s, paths): (s, paths) for s, paths in jobs.items()}
        for fut in tqdm(
            as_completed(futures),
            total=len(futures),
            desc="grading",
            unit="student",
            disable=not progress,
        ):
            s, paths = futures[fut]
            try:
                results[s].update(fut.result())
            except Exception as e:  # a grader bug must not stop the class either
                for stem in paths:
                    results[s][stem] = (
                        _zero(
                            books[stem], C.CRASHED, f"grader error: {type(e).__name__}: {e}"[:300]
                        ),
                        [],
                    )
    rows = {}
    by_id = {it.id: it for items in books.values() for it in items}
    for s in who:
        got = collected[s]
        flat = []
        notes = [
            *got.notes,
            *(
                f"ignored {rel}: {why}"
                for rel, why in sorted(got.ignored.items())
                if rel.lower().endswith(".ipynb")
            ),
        ]
        for stem in books:
            res, nts = results[s][stem]
            flat += res
            notes += [f"{stem}: {n}" for n in nts]
        if check_student_name(s) is None:  # a reserved or odd name gets no folder, only its row
            write_student(out, s, flat, notes, mode, tag_mistakes(by_id, flat), unisolated)
        rows[s] = {r.id: r.points for r in flat}
    ids = [it.id for it in all_items() if it.notebook in books]
    write_gradebook(out, ids, rows, mode)
    write_collection(out, collected)
    write_new(
        out / "grading.json",
        json.dumps(
            {
                **_inputs_meta(key, seed, submission),
                "shard": list(shard),
                "students": who,
                "items": ids,
                "assignment": list(books) if assignment is not None else "all exercises",
                **({"only students": sorted(only)} if only is not None else {}),
                "isolation": mode if mode != "none" else f"none (NOT ISOLATED: {unisolated})",
                "units": _units_meta(mode),
                "resource_control": control,
                "rejected": {s: sorted(set(r)) for s, r in rejected.items()},
                "collection": collection_counts(collected),
                "seconds": {s: seconds[s] for s in sorted(seconds)},
            },
            indent=1,
        ),
    )
    write_class_report(out, by_id)
    return rows


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


RESERVE = 320 * 2**20  # what the grader may grow by while it reads results (tests: < 300 MiB)


def _rss() -> int:
    try:
        kib = next(
            int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")
        )
    except (OSError, StopIteration, ValueError):
        return 0
    return kib * 1024


def resource_control(limits: Limits, workers: int) -> tuple[Limits, str]:
    """Each student's sandbox as one cgroup (``cgroup.py``): its memory lowered so that
    ``workers`` sandboxes and this grader fit in what the grader may use (so a sandbox that fills
    its memory is its own OOM, never one whose victim is a classmate); the status for
    ``grading.json``. Where no cgroup can be made, one line on stderr says so."""
    why = cgroup.problem()
    if why is None:
        cgroup.sweep_stale()
        memory = cgroup.fit(int(limits.student_memory_gb * 2**30), workers, _rss() + RESERVE)
        limits = dataclasses.replace(limits, student_memory_gb=memory / 2**30)
    else:
        print(
            f"mha-grader: no cgroup per student ({why}); each sandbox is bounded only by "
            "per-process limits (see the instructor guide, 'Per-student bounds')",
            file=sys.stderr,
        )
    return limits, cgroup.status(limits.bounds())


def _units_meta(mode: str) -> str:
    """How the units of one student were kept apart (see confine.py), for grading.json."""
    how = confine.unit_mode(mode)
    if how == "landlock":
        return "one sandbox per student; each unit confined by Landlock and its own namespaces"
    if how == "sandbox":
        return f"one sandbox per unit (slower; {confine.problem() or confine.ENV_VAR + '=sandbox'})"
    return "not isolated"


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

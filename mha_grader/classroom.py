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
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mha_grader import compare as C
from mha_grader.keys import StudentInputs, fingerprint
from mha_grader.outputs import (
    check_notebook,
    check_student_folder,
    check_student_name,
    collisions,
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
        return {"inputs": "secret key", "key_fingerprint": fingerprint(key), "submission": submission}
    return {"inputs": "public seed", "seed": seed}


def students(submissions: Path, shard: tuple[int, int] = (1, 1)) -> list[str]:
    """The student folders of this shard (sorted by name, every n-th from k - 1); entries that
    are not folders (a stray file) are ignored, folders that are links are kept (and refused)."""
    k, n = shard
    if not 1 <= k <= n:
        raise ValueError(f"shard: expected K/N with 1 <= K <= N, got {k}/{n}")
    names = sorted(p.name for p in submissions.iterdir()
                   if (p.is_dir() or p.is_symlink()) and not p.name.startswith("."))
    return names[k - 1::n]


def _zero(items, status: str, message: str) -> list[C.ItemResult]:
    return [C.ItemResult(it.id, it.function, 0.0, it.points, status, message) for it in items]


def grade_class(submissions: Path, out: Path, *, workers: int = 2, key: bytes | None = None,
                seed: int | None = None, submission: str = "", limits: Limits | None = None,
                shard: tuple[int, int] = (1, 1), progress: bool = True, no_isolation: bool = False,
                isolation_mode: str | None = None) -> dict[str, dict[str, float]]:
    """Grade every student of the shard; write ``OUT/<student>/`` files and ``OUT/grades.csv``.

    Inputs: with ``key`` (the secret run key, see ``keys.py``) each student gets their own inputs,
    from HMAC(key, student, item, ``submission``); with only ``seed``, every student gets the same
    PUBLIC inputs (for a student's own CI, where no secret can be kept).

    Isolation: the strongest available (``isolation.choose``); ``IsolationUnavailable`` (saying
    how to get some) when there is none, unless ``no_isolation`` (then every output says "not
    isolated"). ``OUT`` must be new or empty. Refused layouts (a student folder that is a link,
    a hard-linked or symlinked notebook, a reserved or odd name) get status "rejected".
    """
    from tqdm.auto import tqdm

    if (key is None) == (seed is None):
        raise ValueError("grade_class: give exactly one of key (secret inputs) or seed (public inputs)")

    def inputs(student: str):
        return StudentInputs(key, student, submission) if key is not None else int(seed)

    mode = "none" if no_isolation else isolation.choose(isolation_mode, allow_none=False)
    limits, control = resource_control(limits or Limits(), workers)
    fresh_folder(out)
    books = notebooks()
    who = students(submissions, shard)
    jobs, results, rejected = {}, {s: {} for s in who}, {}
    clash = collisions(who)
    for s in who:
        why = check_student_name(s) or clash.get(s) or check_student_folder(submissions / s)
        for stem, items in books.items():
            path = submissions / s / f"{stem}.ipynb"
            bad = why or check_notebook(path)
            if bad:
                rejected.setdefault(s, []).append(bad if why else f"{stem}: {bad}")
                results[s][stem] = (_zero(items, C.REJECTED, bad), [])
            elif path.is_file():
                jobs.setdefault(s, {})[stem] = path
            else:
                results[s][stem] = (_zero(items, C.MISSING_NOTEBOOK, f"no {stem}.ipynb handed in"), [])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(grade_submission, paths, books, inputs(s), limits, mode): (s, paths)
                   for s, paths in jobs.items()}
        for fut in tqdm(as_completed(futures), total=len(futures), desc="grading",
                        unit="student", disable=not progress):
            s, paths = futures[fut]
            try:
                results[s].update(fut.result())
            except Exception as e:  # a grader bug must not stop the class either
                for stem in paths:
                    results[s][stem] = (_zero(books[stem], C.CRASHED,
                                              f"grader error: {type(e).__name__}: {e}"[:300]), [])
    rows = {}
    for s in who:
        flat, notes = [], []
        for stem in books:
            res, nts = results[s][stem]
            flat += res
            notes += [f"{stem}: {n}" for n in nts]
        if check_student_name(s) is None:  # a reserved or odd name gets no folder, only its row
            write_student(out, s, flat, notes, mode)
        rows[s] = {r.id: r.points for r in flat}
    ids = [it.id for it in all_items()]
    write_gradebook(out, ids, rows, mode)
    write_new(out / "grading.json", json.dumps(
        {**_inputs_meta(key, seed, submission), "shard": list(shard), "students": who, "items": ids,
         "isolation": mode if mode != "none" else "none (NOT ISOLATED: --no-isolation)",
         "units": _units_meta(mode), "resource_control": control,
         "rejected": {s: sorted(set(r)) for s, r in rejected.items()}}, indent=1))
    return rows


RESERVE = 320 * 2**20  # what the grader may grow by while it reads results (tests: < 300 MiB)


def _rss() -> int:
    try:
        kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
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
        print(f"mha-grader: no cgroup per student ({why}); each sandbox is bounded only by "
              "per-process limits (see the instructor guide, 'Per-student bounds')", file=sys.stderr)
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


def merge(parts: list[Path], out: Path) -> dict[str, dict[str, float]]:
    """Join shard folders (each with grading.json and per-student results) into one gradebook."""
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, float]] = {}
    ids: list[str] = []
    inputs, modes = set(), set()
    for part in parts:
        meta = json.loads((part / "grading.json").read_text(encoding="utf-8"))
        inputs.add(json.dumps({k: meta[k] for k in _INPUT_KEYS if k in meta}, sort_keys=True))
        modes.add(meta.get("isolation", "unknown"))
        ids = ids or meta["items"]
        if meta["items"] != ids:
            raise ValueError(f"{part}: graded other items than the first shard")
        for s in meta["students"]:
            if s in rows:
                raise ValueError(f"{part}: student {s!r} is in two shards")
            if check_student_name(s) is not None:
                rows[s] = {}
                continue
            res = json.loads((part / s / "results.json").read_text(encoding="utf-8"))
            rows[s] = {t["name"]: float(t["score"]) for t in res["tests"]}
            if part.resolve() != out.resolve():
                mkdir_new(out / s)
                for name in ("results.json", "feedback.md"):
                    _copy_regular(part / s / name, out / s / name)
    unisolated = any(m.startswith("none") for m in modes)
    write_gradebook(out, ids, rows, "none" if unisolated else "")
    meta_path = out / "grading.json"
    if meta_path.is_file() and not meta_path.is_symlink():
        meta_path.unlink()
    write_new(meta_path, json.dumps(
        {**(json.loads(next(iter(inputs))) if len(inputs) == 1
            else {"inputs": "mixed", "parts": [json.loads(i) for i in sorted(inputs)]}), "shard": [1, 1],
         "students": sorted(rows), "items": ids, "isolation": sorted(modes),
         "merged_from": [str(p) for p in parts]}, indent=1))
    return rows

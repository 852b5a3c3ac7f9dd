"""Grade a class: ``SUBMISSIONS/<student>/exNN_<topic>.ipynb`` -> ``OUT/`` gradebook.

Work units are students: each student's notebooks are graded in one sandboxed child (a fresh
one after a crash or a timeout); threads only wait on the children, so ``workers`` children run
at once. ``shard=(k, n)`` grades the students
whose position in the sorted list is ``k - 1`` modulo ``n``; ``merge`` joins shard folders.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import compare as C
from .keys import StudentInputs, fingerprint
from .registry import all_items, notebooks
from .report import write_gradebook, write_student
from .runner import grade_submission
from .sandbox import Limits

_INPUT_KEYS = ("inputs", "key_fingerprint", "seed", "submission")


def _inputs_meta(key: bytes | None, seed: int | None, submission: str) -> dict:
    """What grading.json says about the inputs: never the key, only its fingerprint."""
    if key is not None:
        return {"inputs": "secret key", "key_fingerprint": fingerprint(key), "submission": submission}
    return {"inputs": "public seed", "seed": seed}


def students(submissions: Path, shard: tuple[int, int] = (1, 1)) -> list[str]:
    """The student folders of this shard (sorted by name, every n-th from k - 1)."""
    k, n = shard
    if not 1 <= k <= n:
        raise ValueError(f"shard: expected K/N with 1 <= K <= N, got {k}/{n}")
    names = sorted(p.name for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    return names[k - 1::n]


def grade_class(submissions: Path, out: Path, *, workers: int = 2, key: bytes | None = None,
                seed: int | None = None, submission: str = "", limits: Limits | None = None,
                shard: tuple[int, int] = (1, 1), progress: bool = True) -> dict[str, dict[str, float]]:
    """Grade every student of the shard; write ``OUT/<student>/`` files and ``OUT/grades.csv``.

    Inputs: with ``key`` (the secret run key, see ``keys.py``) each student gets their own inputs,
    from HMAC(key, student, item, ``submission``); with only ``seed``, every student gets the same
    PUBLIC inputs (for a student's own CI, where no secret can be kept).
    """
    from tqdm.auto import tqdm

    if (key is None) == (seed is None):
        raise ValueError("grade_class: give exactly one of key (secret inputs) or seed (public inputs)")

    def inputs(student: str):
        return StudentInputs(key, student, submission) if key is not None else int(seed)

    limits = limits or Limits()
    out.mkdir(parents=True, exist_ok=True)
    books = notebooks()
    who = students(submissions, shard)
    jobs, results = {}, {s: {} for s in who}
    for s in who:
        for stem, items in books.items():
            path = submissions / s / f"{stem}.ipynb"
            if path.is_file() and not path.is_symlink():
                jobs.setdefault(s, {})[stem] = path
            else:
                results[s][stem] = ([C.ItemResult(it.id, it.function, 0.0, it.points,
                                                  C.MISSING_NOTEBOOK, f"no {stem}.ipynb handed in")
                                     for it in items], [])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(grade_submission, paths, books, inputs(s), limits): (s, paths)
                   for s, paths in jobs.items()}
        for fut in tqdm(as_completed(futures), total=len(futures), desc="grading",
                        unit="student", disable=not progress):
            s, paths = futures[fut]
            try:
                results[s].update(fut.result())
            except Exception as e:  # a grader bug must not stop the class either
                for stem in paths:
                    results[s][stem] = ([C.ItemResult(it.id, it.function, 0.0, it.points, C.CRASHED,
                                                      f"grader error: {type(e).__name__}: {e}"[:300])
                                         for it in books[stem]], [])
    rows = {}
    for s in who:
        flat, notes = [], []
        for stem in books:
            res, nts = results[s][stem]
            flat += res
            notes += [f"{stem}: {n}" for n in nts]
        write_student(out, s, flat, notes)
        rows[s] = {r.id: r.points for r in flat}
    ids = [it.id for it in all_items()]
    write_gradebook(out, ids, rows)
    (out / "grading.json").write_text(json.dumps(
        {**_inputs_meta(key, seed, submission), "shard": list(shard), "students": who, "items": ids},
        indent=1),
        encoding="utf-8")
    return rows


def merge(parts: list[Path], out: Path) -> dict[str, dict[str, float]]:
    """Join shard folders (each with grading.json and per-student results) into one gradebook."""
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, float]] = {}
    ids: list[str] = []
    inputs = set()
    for part in parts:
        meta = json.loads((part / "grading.json").read_text(encoding="utf-8"))
        inputs.add(json.dumps({k: meta[k] for k in _INPUT_KEYS if k in meta}, sort_keys=True))
        ids = ids or meta["items"]
        if meta["items"] != ids:
            raise ValueError(f"{part}: graded other items than the first shard")
        for s in meta["students"]:
            if s in rows:
                raise ValueError(f"{part}: student {s!r} is in two shards")
            res = json.loads((part / s / "results.json").read_text(encoding="utf-8"))
            rows[s] = {t["name"]: float(t["score"]) for t in res["tests"]}
            if part.resolve() != out.resolve():
                shutil.copytree(part / s, out / s, dirs_exist_ok=True)
    write_gradebook(out, ids, rows)
    (out / "grading.json").write_text(json.dumps(
        {**(json.loads(next(iter(inputs))) if len(inputs) == 1
            else {"inputs": "mixed", "parts": [json.loads(i) for i in sorted(inputs)]}), "shard": [1, 1],
         "students": sorted(rows), "items": ids, "merged_from": [str(p) for p in parts]}, indent=1),
        encoding="utf-8")
    return rows

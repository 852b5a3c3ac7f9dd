"""Grade a class: ``SUBMISSIONS/<student>/exNN_<topic>.ipynb`` -> ``OUT/`` gradebook.

Work units are students: each student's notebooks are graded in one sandboxed child (a fresh
one after a crash or a timeout); threads only wait on the children, so ``workers`` children run
at once. ``shard=(k, n)`` grades the students
whose position in the sorted list is ``k - 1`` modulo ``n``; ``merge`` joins shard folders.

Here: ``grade_class`` and the students of a shard. Joining shard folders is ``merge.py``;
writing ``collection.csv``, ``collection_report.py``; each student's bounds (a cgroup) and how
units were kept apart, ``class_bounds.py``.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mha_grader import compare as C
from mha_grader import policy
from mha_grader.class_bounds import (  # noqa: F401 - re-exported: classroom.py's names before its split
    RESERVE,
    _units_meta,
    resource_control,
)
from mha_grader.class_report import tag_mistakes, write_class_report
from mha_grader.collect import Collected, collect
from mha_grader.collection_report import (  # noqa: F401 - re-exported: classroom.py's names before its split
    COLLECTION_HEADER,
    collection_counts,
    write_collection,
)
from mha_grader.errors import IsolationUnavailable
from mha_grader.keys import StudentInputs, fingerprint
from mha_grader.merge import (  # noqa: F401 - re-exported: classroom.py's names before its split
    MergeRefused,
    check_complete,
    check_consistent,
    merge,
)
from mha_grader.outputs import (
    check_notebook,
    check_student_folder,
    check_student_name,
    collisions,
    fresh_folder,
    write_new,
)
from mha_grader.registry import all_items, notebooks
from mha_grader.report import write_gradebook, write_student
from mha_grader.runner import grade_submission
from mha_grader.sandbox import isolation
from mha_grader.sandbox.launch import Limits


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
    graded = [it for it in all_items() if it.notebook in books]
    ids = [it.id for it in graded]
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
                "policy": policy.fingerprint(graded),
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

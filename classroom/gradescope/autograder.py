"""Gradescope's autograder run (``run_autograder`` calls ``python -I autograder.py ROOT``).

1. **collect**: find the exercise notebooks anywhere in ``ROOT/submission`` by their content and
   name (folders, browser renames such as ``ex02_scaled_dot_product_attention (1).ipynb``; the
   course's one collector, ``mha_grader/collect.py``) and copy each, as a new plain file, to
   ``<work>/submissions/student/<exNN_topic>.ipynb``;
2. **grade** them with the course's grader (``mha_grader.classroom.grade_class``) and its own
   isolation: a bubblewrap sandbox, or a dedicated unprivileged user where the grader is root in a
   container; never without. The inputs are secret and fresh for every submission:
   HMAC-SHA256(the instructor's key, "student", item id, Gradescope's submission id), see
   ``mha_grader/keys.py``. The key is read from ``ROOT/source/key`` (root's only, mode 0600) here,
   in this process: it is on no command line and in no environment (a child in the dedicated-user
   mode can read every process's command line), and the sandboxes get only the cases. The
   submission id is the ``id`` of ``ROOT/submission_metadata.json``. Without a usable key or id
   the run refuses (score 0, exit 2): it never falls back to public inputs;
3. **report**: write ``ROOT/results/results.json`` (Gradescope's format) from the gradebook,
   only after grading has returned, i.e. after every process of the submission was killed.
   With ``ROOT/source/assignment`` ("ex01 ex02") only those exercises are collected and scored.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _known() -> dict[str, str]:
    """``"ex02"`` -> ``"ex02_scaled_dot_product_attention"`` for every graded exercise."""
    from mha_grader.registry import notebooks

    return {stem.split("_")[0]: stem for stem in notebooks()}


def collect(upload: Path, dest: Path, assignment: set[str] | None) -> dict:
    """Copy the file the course's collector (``mha_grader.collect``, the one ``mha-course grade``
    uses: content and name, anywhere in the upload, a stated rule for competing copies) takes
    for each exercise into ``dest``; return what was taken and the notes."""
    import stat

    from mha_grader.collect import collect as find

    known = _known()
    wanted = [stem for prefix, stem in known.items() if assignment is None or prefix in assignment]
    dest.mkdir(parents=True, exist_ok=True)
    got = find(upload, wanted)
    notes, taken = list(got.notes), {}
    for stem, path in sorted(got.taken.items()):
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            notes.append(f"ignored {got.source[stem]}: not a plain file")
            continue
        shutil.copyfile(path, dest / f"{stem}.ipynb", follow_symlinks=False)
        taken[stem] = got.source[stem]
    notes += [f"ignored {rel}: {why}" for rel, why in sorted(got.ignored.items())]
    if not taken:
        notes.insert(0, "no exercise notebook (exNN_<topic>.ipynb) was found in the upload")
    return {"taken": taken, "notes": notes}


def _assignment(path: Path) -> set[str] | None:
    if not path.is_file():
        return None
    return {w.lower()[:4] for w in path.read_text(encoding="utf-8").split()}


def _stems(wanted: set[str] | None) -> list[str] | None:
    """The notebook stems of the assignment's exercises (None: all of them)."""
    if wanted is None:
        return None
    return [stem for prefix, stem in _known().items() if prefix in wanted] or None


def report(graded: Path, notes: dict, assignment: set[str] | None, seconds: float) -> dict:
    """Gradescope's results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/)."""
    res = json.loads((graded / "student" / "results.json").read_text(encoding="utf-8"))
    meta = json.loads((graded / "grading.json").read_text(encoding="utf-8"))
    tests = [t for t in res["tests"] if assignment is None or t["name"][:4] in assignment]
    for t in tests:
        t["visibility"] = "visible"
    lines = [*notes["notes"], *(n for n in res.get("output", "").split("\n") if n.strip())]
    return {
        "score": float(sum(t["score"] for t in tests)),
        "execution_time": max(0, round(seconds)),
        "output": "\n".join(lines),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {
            "isolation": meta.get("isolation", "unknown"),
            "graded_files": notes["taken"],
            # the key's public fingerprint (never the key) and the submission id
            "inputs": meta.get("inputs"),
            "key_fingerprint": meta.get("key_fingerprint"),
            "submission": meta.get("submission"),
        },
    }


def failed(message: str, seconds: float) -> dict:
    """results.json when the grader itself could not run: no points, a message, no guesswork."""
    return {
        "score": 0.0,
        "execution_time": max(0, round(seconds)),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
        "output": f"The autograder could not grade this submission: {message}. "
        "Your instructor can see the log; please tell them.",
    }


class NotConfigured(Exception):
    """The autograder zip or Gradescope's metadata lacks what secret inputs need."""


def grading_key(source: Path) -> bytes:
    """The instructor's key from ``source/key`` (``keys.read_key_file``: 0600, no link, hex)."""
    from mha_grader.keys import KeyFileError, read_key_file

    path = source / "key"
    if not (path.exists() or path.is_symlink()):
        old = " (source/seed is no longer used)" if (source / "seed").exists() else ""
        raise NotConfigured(f"the autograder has no grading key: source/key is missing{old}")
    try:
        return read_key_file(path)
    except KeyFileError as e:
        raise NotConfigured(f"the grading key is unusable: {e}") from None


def submission_id(root: Path) -> str:
    """Gradescope's id of this submission (``submission_metadata.json``, field ``id``)."""
    path = root / "submission_metadata.json"
    try:
        sid = json.loads(path.read_text(encoding="utf-8"))["id"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NotConfigured(
            f"no submission id in submission_metadata.json ({type(e).__name__})"
        ) from None
    if isinstance(sid, bool) or not isinstance(sid, (int, str)) or not str(sid).strip():
        raise NotConfigured(f"submission_metadata.json: id {sid!r} is not a submission id")
    return str(sid).strip()


def run(root: Path) -> int:
    """The whole autograder run for the Gradescope folder ``root``; 0, or 2 if it could not grade."""
    from mha_grader.classroom import grade_class
    from mha_grader.errors import IsolationUnavailable

    start = time.monotonic()
    wanted = _assignment(root / "source" / "assignment")
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    try:
        key, sid = grading_key(root / "source"), submission_id(root)
    except NotConfigured as e:
        print(f"autograder: refusing to grade: {e}", file=sys.stderr)
        return _write(results, failed(str(e), time.monotonic() - start), 2)
    code, out = 0, None
    with tempfile.TemporaryDirectory(prefix="mha-gradescope-") as work:  # 0700, root's
        student = Path(work) / "submissions" / "student"
        notes = collect(root / "submission", student, wanted)
        try:
            grade_class(
                student.parent,
                Path(work) / "graded",
                workers=1,
                key=key,
                submission=sid,
                progress=False,
                assignment=_stems(wanted),
            )
        except IsolationUnavailable as e:
            print(f"mha-course grade: refusing to grade: {e}", file=sys.stderr)
            code, out = (
                2,
                failed("no isolation is available on this machine", time.monotonic() - start),
            )
        except Exception as e:  # a grader bug: say so, score nothing
            print(f"grader error: {type(e).__name__}: {e}", file=sys.stderr)
            code, out = 2, failed("the grader stopped with an error", time.monotonic() - start)
        if out is None:
            out = report(Path(work) / "graded", notes, wanted, time.monotonic() - start)
    return _write(results, out, code)


def _write(results: Path, out: dict, code: int) -> int:
    tmp = results.with_name(results.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=1), encoding="utf-8")
    tmp.replace(results)
    print(
        f"score {out['score']:g}, isolation {out.get('extra_data', {}).get('isolation', 'none')}, "
        f"{out['execution_time']} s -> {results}"
    )
    return code


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: autograder.py ROOT  (ROOT laid out like /autograder)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(Path(sys.argv[1])))

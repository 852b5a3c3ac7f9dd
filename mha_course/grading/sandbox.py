"""Grade one notebook in a sandboxed child process (the parent side).

The child is ``python -I -m mha_course.grading.child`` in a fresh temporary folder, with a
clean environment, resource limits (address space, CPU time, file size, processes), its own
session (process group), stdout/stderr discarded, and a wall-clock limit per cell, per item
and per notebook. When a stage hangs or kills the child, the parent records that stage's
status, kills the whole group (and any orphan it adopted) and starts a fresh child that skips
it, so every other item is still graded.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import compare as C
from .items import STATIC_FORBIDDEN, Case, Dtype, Item
from .notebook import InvalidNotebook, code_cells


@dataclass(frozen=True)
class Limits:
    """Resource limits for one child; ``memory_gb`` is the address-space limit."""

    memory_gb: float = 4.0
    item_timeout: float = 20.0  # wall seconds per item (all its cases) and per cell
    notebook_timeout: float = 120.0  # wall seconds for the whole notebook, restarts included
    cpu_seconds: int = 120
    file_mb: int = 64
    processes: int = 64  # on top of what the user already runs (not enforced for root)


def _user_tasks() -> int:
    """Threads + processes this user already runs (RLIMIT_NPROC counts them all)."""
    n, uid = 0, os.getuid()
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if p.stat().st_uid == uid:
                n += len(list((p / "task").iterdir()))
    return n


def _preexec(limits: Limits, nproc: int):
    def apply() -> None:
        mem = int(limits.memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        size = limits.file_mb * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def _become_subreaper() -> None:
    """Orphans of a child (double fork + setsid) are re-parented to us, so we can kill them."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


_LIVE: set[int] = set()  # pids of children we are running (other workers' children are safe)
_LOCK = threading.Lock()  # no orphan sweep between a Popen and its registration in _LIVE


def _is_ours(proc_dir: Path) -> bool:
    """Started by a grading child: its environment or command line says so."""
    for name in ("environ", "cmdline"):
        with contextlib.suppress(OSError):
            data = (proc_dir / name).read_bytes()
            if b"MHA_GRADING_CHILD=1" in data or b"mha_course.grading.child" in data:
                return True
    return False


def _kill_orphans() -> None:
    """Kill processes re-parented to us that are not one of our live children."""
    me = os.getpid()
    with _LOCK:
        _sweep(me)


def _sweep(me: int) -> None:
    for _ in range(5):
        found = False
        for p in Path("/proc").glob("[0-9]*"):
            try:
                stat = (p / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            pid = int(p.name)
            if ppid == me and pid not in _LIVE and _is_ours(p):
                found = True
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.waitpid(pid, 0)
        if not found:
            return


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    _LIVE.discard(proc.pid)
    _kill_orphans()


def static_forbidden(cells: list[dict], names: set[str]) -> set[str]:
    """Forbidden distinctive names used in the source (attribute, import, name or exact string)."""
    used: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(cell["source"])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(a.name for a in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    return {n for n in names if n.rsplit(".", 1)[-1] in used & STATIC_FORBIDDEN}


def _encode_cases(item: Item, cases: list[Case], arrays: dict) -> list[list[dict]]:
    out = []
    for i, case in enumerate(cases):
        spec = []
        for k, v in enumerate(case.values()):
            if isinstance(v, np.ndarray):
                key = f"{item.id}__c{i}__a{k}"
                arrays[key] = v
                spec.append({"array": key})
            elif isinstance(v, Dtype):
                spec.append({"dtype": v.name})
            else:
                spec.append({"value": v})
        out.append(spec)
    return out


def _read_child_result(out: Path, item: Item) -> dict | None:
    js, npz = out / f"{item.id}.json", out / f"{item.id}.npz"
    if not js.exists() or js.stat().st_size > 100_000:
        return None
    try:
        status = json.loads(js.read_text(encoding="utf-8"))
        if not isinstance(status, dict):
            raise ValueError("not an object")
        if status.get("status") == "ok":
            counts = [int(n) for n in status.get("n_outputs", [])]
            with np.load(npz, allow_pickle=False) as z:
                status["outputs"] = [[np.asarray(z[f"c{i}_o{j}"]) for j in range(n)]
                                     for i, n in enumerate(counts)]
        return status
    except Exception as e:  # a forged or truncated result file
        return {"status": C.CRASHED, "message": f"unreadable result ({type(e).__name__})"}


def _progress(out: Path) -> str:
    try:
        with open(out / "progress", "rb") as f:
            return f.read(101).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _env(work: Path) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(work), "MHA_GRADING_CHILD": "1"}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    return env


def grade_notebook(path: str | Path, items: list[Item], seed: int, limits: Limits = Limits()
                   ) -> tuple[list[C.ItemResult], list[str]]:
    """Grade ``items`` of one notebook in sandboxed children; returns (results, notes)."""
    _become_subreaper()
    notes: list[str] = []
    try:
        cells = code_cells(path)
    except InvalidNotebook as e:
        return [C.ItemResult(it.id, it.function, 0.0, it.points, C.INVALID_NOTEBOOK, str(e))
                for it in items], [str(e)]
    all_cases = {it.id: it.cases(seed) for it in items}
    banned = static_forbidden(cells, {n for it in items for n in it.forbidden})
    raw: dict[str, dict] = {}
    skip_cells: set[int] = set()
    deadline = time.monotonic() + limits.notebook_timeout
    nproc = _user_tasks() + limits.processes
    with tempfile.TemporaryDirectory(prefix="mha-grade-") as tmp:
        for attempt in range(len(items) + len(cells) + 1):
            pending = [it for it in items if it.id not in raw]
            if not pending:
                break
            if time.monotonic() > deadline:
                for it in pending:
                    raw[it.id] = {"status": C.TIMEOUT, "message": "the notebook ran out of time"}
                break
            root = Path(tmp) / f"run{attempt}"
            job, work, out = root / "job", root / "work", root / "out"
            for d in (job, work, out):
                d.mkdir(parents=True)
            (work / "submission.py").write_text(
                "\n\n".join(c["source"] for c in cells), encoding="utf-8")
            arrays: dict[str, np.ndarray] = {}
            spec = {
                "needs_torch": any(it.framework == "torch" or it.forbidden for it in pending),
                "cells": [c for c in cells if c["index"] not in skip_cells],
                "items": [{**it.child_spec(), "cases": _encode_cases(it, all_cases[it.id], arrays),
                           "static_forbidden": sorted(n for n in banned if n in it.forbidden)}
                          for it in pending],
            }
            (job / "job.json").write_text(json.dumps(spec), encoding="utf-8")
            with open(job / "inputs.npz", "wb") as f:
                np.savez(f, **arrays)
            with _LOCK:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-m", "mha_course.grading.child", str(job), str(out)],
                    cwd=work, env=_env(work), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                    preexec_fn=_preexec(limits, nproc))
                _LIVE.add(proc.pid)
            stage, since, killed = "", time.monotonic(), None
            try:
                while proc.poll() is None:
                    now = time.monotonic()
                    cur = _progress(out)
                    if cur != stage:
                        stage, since = cur, now
                    limit = limits.item_timeout + (30 if stage in ("", "setup") else 0)
                    if now - since > limit or now > deadline:
                        killed = "timeout"
                        break
                    time.sleep(0.05)
            finally:
                _kill_group(proc)
            stage = _progress(out)
            for it in pending:
                res = _read_child_result(out, it)
                if res is not None:
                    raw[it.id] = res
            if stage == "done":
                break
            code = proc.returncode
            if killed or code == -signal.SIGXCPU:
                status, why = C.TIMEOUT, ("took too long" if killed else "used too much CPU time")
            elif code == -signal.SIGKILL:
                status, why = C.CRASHED, "the process was killed (SIGKILL: out of memory?)"
            elif code == -signal.SIGXFSZ:
                status, why = C.CRASHED, "wrote a file larger than the limit"
            else:
                status, why = C.CRASHED, f"the process ended (exit code {code})"
            if stage.startswith("cell "):
                idx = int(stage.split()[1]) if stage.split()[1].isdigit() else -1
                if idx not in {c["index"] for c in cells} or idx in skip_cells:
                    idx = -1
                if idx < 0:
                    break
                skip_cells.add(idx)
                notes.append(f"cell {idx}: {status} ({why}); skipped, grading went on without it")
            elif stage.startswith("item "):
                iid = stage.split(maxsplit=1)[1]
                hit = [it for it in pending if it.id == iid and it.id not in raw]
                if not hit:
                    break
                raw[iid] = {"status": status, "message": why}
            else:
                for it in pending:
                    raw.setdefault(it.id, {"status": status, "message": f"{why} before grading"})
                break
        for it in items:
            raw.setdefault(it.id, {"status": C.CRASHED, "message": "no result"})
        try:
            errs = json.loads((out / "cells.json").read_text(encoding="utf-8"))[:50]
            notes += [f"cell {e['index']}: {e['error']}"[:300] for e in errs if isinstance(e, dict)]
        except Exception:
            pass
        results = [C.judge(it, all_cases[it.id], raw[it.id]) for it in items]
    shutil.rmtree(Path(tmp), ignore_errors=True)
    return results, notes

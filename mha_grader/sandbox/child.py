"""The sandboxed child: the ONLY place learner code runs (``python -I -S``, staged engine).

It reads the job (per notebook: cells to run, items to call, and the staged course package to
import, in which that notebook's forbidden course functions are absent; inputs as a non-pickle
``.npz``), tripwires the forbidden names that live outside the course (torch's), runs the
cells, calls each item's function, and writes what came back in the protocol's format
(``protocol.py``: a status from a fixed set, raw ``.npy`` arrays). Before each stage it re-arms
RLIMIT_CPU. Progress goes to ``progress`` so the parent can time each stage. Nothing it prints
matters: the parent discards stdout/stderr, checks every file and compares numbers itself.

It is a zygote: it imports torch once and forks one process per *unit* (the items of a notebook
that forbid the same names). Each unit gets its own results folder ``out/u<k>`` and temp folder
``$HOME/u<k>`` and, when the job says ``confine``, is confined before any learner code
(``confine.py``: its own namespaces, Landlock); after it, the zygote kills every other process
and removes the temp folder, so nothing of one unit reaches the next.

This module is the zygote (``main``) and what it does between units (clearing, sealing). A unit's
life is ``unit.py``, an item's calls ``calls.py``, the tripwires ``tripwires.py``: all three are
imported here, at start-up, before any confinement.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import sys

from mha_grader.sandbox import confine
from mha_grader.sandbox.calls import (  # noqa: F401 - re-exported: child.py's names before its split
    MAX_ELEMENTS,
    WrongType,
    _run_item,
    _to_array,
)
from mha_grader.sandbox.tripwires import (  # noqa: F401 - re-exported: child.py's names before its split
    ALIASES,
    Tripwires,
    _resolve,
)
from mha_grader.sandbox.unit import CONFINE_FAILED, _unit_dirs, _unit_process

SEALED = "sealed.json"  # results folder -> its name while later units run (see _seal)
DISK_FULL_FLAG = "disk_full"  # a unit filled its writable space (see _clear_after_unit)
PRELOADABLE = frozenset({"matplotlib.pyplot", "torch.utils.flop_counter"})  # see job._preload


def _clear_after_unit(confined: bool, unit_tmp: str, out_dir: str) -> None:
    """The zygote, after a unit: nothing of it may reach the next unit (processes, files).

    Before it frees the unit's files it looks whether they filled the writable space, and if so
    leaves ``out/disk_full`` for the parent (which also polls, but could miss a unit that fills
    and is cleared between two polls). Learner code could write that file too: it only earns
    its writer a note and the disk status on items without a result, never a mark."""
    if confined:
        try:
            confine.kill_others()
        except confine.ConfineFailed:
            os._exit(CONFINE_FAILED)
    from mha_grader.sandbox import space

    if any(space.full(d) for d in (unit_tmp, "/dev/shm")):
        with contextlib.suppress(OSError):
            os.close(
                os.open(os.path.join(out_dir, DISK_FULL_FLAG), os.O_WRONLY | os.O_CREAT, 0o600)
            )
    import shutil

    shutil.rmtree(unit_tmp, ignore_errors=True)


def _metadata(out_dir: str) -> dict[str, tuple[int, float, float]]:
    """Mode and times of the results folder and the progress file (every unit can reach them)."""
    out = {}
    for p in (out_dir, os.path.join(out_dir, "progress")):
        with contextlib.suppress(OSError):
            st = os.stat(p)
            out[p] = (st.st_mode & 0o7777, st.st_atime, st.st_mtime)
    return out


def _seal(out_dir: str, name: str, sealed: dict[str, str], meta: dict) -> None:
    """The zygote, after a confined unit: no later unit may learn anything from it through the
    file system's metadata. Its results folder takes an unguessable name until the last unit
    is done (a later unit may not list ``out``, but could ``stat``/``readlink``/``getxattr``
    by name: link targets, names, sizes, times, attributes), and what every unit can reach by
    name (the results folder, the progress file) gets its mode, times and attributes back."""
    import secrets

    hidden = "." + secrets.token_hex(16)
    os.rename(os.path.join(out_dir, name), os.path.join(out_dir, hidden))
    sealed[name] = hidden
    with open(os.path.join(out_dir, "sealed.tmp"), "w", encoding="ascii") as f:  # if we are
        json.dump(sealed, f)  # killed, the parent names them back (sandbox.unseal)
    os.replace(os.path.join(out_dir, "sealed.tmp"), os.path.join(out_dir, SEALED))
    for p, (mode, atime, mtime) in meta.items():
        with contextlib.suppress(OSError):
            for attr in os.listxattr(p, follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.removexattr(p, attr, follow_symlinks=False)
        with contextlib.suppress(OSError):
            os.chmod(p, mode)
        with contextlib.suppress(OSError):
            os.utime(p, (atime, mtime))


def _unseal(out_dir: str, sealed: dict[str, str]) -> None:
    """No unit runs any more: every results folder gets its name back, for the parent."""
    for name, hidden in sealed.items():
        os.rename(os.path.join(out_dir, hidden), os.path.join(out_dir, name))
    sealed.clear()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(out_dir, SEALED))


def _run_units(
    notebooks, job, arrays, wires, mark, cpu, out_dir, confined, sealed, meta, np, torch
):
    """The zygote's loop over ``notebooks`` (units): fork each, wait, clear, seal; a unit that
    stopped inside a stage stops the zygote the same way (the parent learns where)."""
    from mha_grader.sandbox import protocol

    for nb in notebooks:
        # One process per unit, forked before any learner code: it imports ITS staged package.
        unit_out, unit_tmp = _unit_dirs(nb, out_dir)
        pid = os.fork()
        if pid == 0:
            _unit_process(nb, job, arrays, wires, mark, cpu, unit_out, unit_tmp, np, torch)
        _, status = os.waitpid(pid, 0)
        if nb.get("channel_fd") is not None:  # the zygote keeps no unit's channel
            with contextlib.suppress(OSError):
                os.close(nb["channel_fd"])
        _clear_after_unit(confined, unit_tmp, out_dir)
        with open(os.path.join(out_dir, "progress"), "rb") as f:
            last = f.read(101).decode("ascii", "replace").strip()
        stop = (
            os.WIFSIGNALED(status)
            or os.WEXITSTATUS(status) != 0
            or last != protocol.unit_end_stage(nb["name"])
        )
        if confined and not stop:
            _seal(out_dir, nb["dir"], sealed, meta)
        if stop:
            _unseal(out_dir, sealed)
        if os.WIFSIGNALED(status):  # die the same way, so the parent knows which stage did it
            os.kill(os.getpid(), os.WTERMSIG(status))
            os._exit(1)
        if stop:
            os._exit(os.WEXITSTATUS(status) or 3)  # it exited inside a stage (os._exit...)


def _next_job(fd: int) -> list[dict] | None:
    """The units of the parent's next job, read from ``fd`` to its end (the parent is trusted;
    at most ``protocol.NEXT_JOB_BYTES``), or None: no next job (an empty one, or the pipe closed)."""
    from mha_grader.sandbox import protocol

    data = b""
    with contextlib.suppress(OSError):
        while len(data) <= protocol.NEXT_JOB_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
    with contextlib.suppress(OSError):
        os.close(fd)
    if not data or len(data) > protocol.NEXT_JOB_BYTES:
        return None
    try:
        units = json.loads(data)["notebooks"]
    except (ValueError, KeyError, TypeError):
        return None
    return units if isinstance(units, list) and units else None


def main(job_dir: str, out_dir: str) -> None:
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    base = [*sys.path, *job["sys_path"]]
    sys.path[:] = base
    job["_base"] = base
    if job.get("no_network"):  # no socket of any family from here on (nonet.py)
        from mha_grader.sandbox import nonet

        try:
            nonet.forbid_sockets()
        except OSError:
            os._exit(CONFINE_FAILED)
    if job.get("reads"):  # mode "user": read only the runtime and this job, never the real course
        from mha_grader.sandbox import reach

        try:
            reach.restrict_reads(job["reads"]["roots"], job["reads"]["hide"])
        except Exception:  # noqa: BLE001 - not confined: run no learner code
            os._exit(CONFINE_FAILED)
    import numpy as np

    from mha_grader.sandbox import protocol

    with np.load(os.path.join(job_dir, "inputs.npz"), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    progress = os.open(os.path.join(out_dir, "progress"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    stream = job.get("progress_fd")  # the parent's clock reads THIS (stage_clock._Stream)
    write = os.write

    owner = [os.getpid()]  # the harness process: the zygote, then each unit (it sets its own)

    def mark(stage: str) -> None:
        if os.getpid() != owner[0]:  # a copy of the harness a cell forked is not the harness
            return
        line = (stage[: protocol.MAX_STAGE].ljust(protocol.MAX_STAGE) + "\n").encode()
        os.pwrite(progress, line, 0)  # the zygote's record of where a unit stopped
        if stream is not None:
            write(stream, line)  # < PIPE_BUF: one atomic write

    mark.owner = owner
    mark(protocol.SETUP)
    torch = None
    if job["needs_torch"]:
        import torch

        torch.set_num_threads(1)
        # Pick torch's CPU kernels (AVX2, AVX-512...) now: it reads /proc/cpuinfo once, on first
        # use, and a confined unit may not read it, so each unit would fall back to the DEFAULT
        # kernels - slower, and rounding differently from the parent's reference (ex10's
        # gradients were off by 1e-8 in float64). Forked units inherit the choice.
        torch.backends.cpu.get_cpu_capability()
        # Optimizers import torch's compiler (~1.4 s CPU) only to call two no-ops: stand in for
        # it until something needs more (eager.py).
        from mha_grader.sandbox import eager

        eager.defer_dynamo()
    for mod in job.get("preload", []):
        if mod in PRELOADABLE:
            with contextlib.suppress(Exception):
                importlib.import_module(mod)
    wires = Tripwires()
    # Course functions are absent from the staged package; torch's are wired: now, when torch is
    # imported, or else the first time learner code imports it (a NumPy job does not import it).
    outside = sorted(
        {
            n
            for nb in job["notebooks"]
            for it in nb["items"]
            for n in it["forbidden"]
            if not n.startswith("mha_course.")
        }
    )
    if torch is not None:
        for name in outside:
            wires.install(name)
    else:
        wires.install_on_import(outside)
    cpu = float(job.get("item_cpu", 0))
    confined = bool(job.get("confine"))
    if confined:
        confine.become_subreaper()
        confine.warm_up(job["_base"], [out_dir])
    meta = _metadata(out_dir)
    # What the zygote imported lives as long as it does: out of the collector's sight, so that a
    # unit's collections neither walk those objects nor write to (and so copy) their pages.
    gc.freeze()
    sealed: dict[str, str] = {}  # unit folder -> the unguessable name it has until the end
    units = (job, arrays, wires, mark, cpu, out_dir, confined, sealed, meta, np, torch)
    _run_units(job["notebooks"], *units)
    _unseal(out_dir, sealed)
    mark(protocol.DONE)
    if job.get("next_fd") is not None:  # held by the parent (sandbox/watch.py): a next job?
        # "waiting", on a pipe no unit holds (each closed it before its code ran): a "done" that
        # learner code wrote to the progress stream does not make the parent hold the child
        with contextlib.suppress(OSError):
            os.write(job["ready_fd"], b"w")
            os.close(job["ready_fd"])
        more = _next_job(job["next_fd"])
        job["next_fd"] = job["ready_fd"] = None  # closed: no number for a later unit to close
        if more:
            for nb in job["notebooks"]:  # the parent has read them: hidden from what runs next
                if os.path.isdir(os.path.join(out_dir, nb["dir"])):
                    _seal(out_dir, nb["dir"], sealed, meta)
            job["notebooks"] = more
            mark(protocol.SETUP)
            _run_units(more, *units)
            _unseal(out_dir, sealed)
            mark(protocol.DONE)
    os._exit(0)  # no atexit handlers, no lingering threads

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
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import importlib
import json
import os
import sys
import traceback

from mha_grader.errors import ForbiddenCall
from mha_grader.feedback import exception_report, return_kind
from mha_grader.sandbox import channel, confine, defs_only

try:
    import resource
except ImportError:  # Windows: only the in-process check uses this module there
    resource = None

ALIASES = {  # more doors to the same forbidden room
    "torch.nn.functional.scaled_dot_product_attention": (
        "torch._C._nn.scaled_dot_product_attention",
        "torch.ops.aten.scaled_dot_product_attention",
        "torch.ops.aten._scaled_dot_product_attention_math",
        "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
        "torch.ops.aten._scaled_dot_product_flash_attention",
        "torch.ops.aten._scaled_dot_product_efficient_attention",
    ),
    "torch.nn.MultiheadAttention": ("torch.nn.functional.multi_head_attention_forward",),
}
_PROCESS_CALLS = (
    "fork",
    "forkpty",
    "system",
    "popen",
    "posix_spawn",
    "posix_spawnp",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "kill",
    "killpg",
    "setsid",
    "setpgid",
)
MAX_ELEMENTS = 20_000_000
SEALED = "sealed.json"  # results folder -> its name while later units run (see _seal)
DISK_FULL_FLAG = "disk_full"  # a unit filled its writable space (see _clear_after_unit)
CONFINE_FAILED = 97  # exit code: a unit could not be confined (it ran no learner code)
PRELOADABLE = frozenset({"matplotlib.pyplot", "torch.utils.flop_counter"})  # see runner._preload


class WrongType(Exception):
    """The learner's function returned something that is not plain numbers."""


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        for p in parts[cut:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


class Tripwires:
    """Replace forbidden functions/classes everywhere they are bound; record armed calls."""

    def __init__(self) -> None:
        self.armed: set[str] = set()
        self.hits: set[str] = set()
        self._undo: list[tuple[object, str, object]] = []

    def _check(self, name: str) -> None:
        if name in self.armed:
            self.hits.add(name)
            raise ForbiddenCall(name)

    def install(self, name: str) -> None:
        for dotted in (name, *ALIASES.get(name, ())):
            try:
                orig = _resolve(dotted)
            except Exception:
                continue
            wire = self._wrap(orig, name)
            owner, _, attr = dotted.rpartition(".")
            try:
                self._set(_resolve(owner), attr, wire, orig)
            except Exception:
                pass
            for mod in list(sys.modules.values()):
                try:
                    for k, v in list(vars(mod).items()):
                        if v is orig:
                            self._set(mod, k, wire, orig)
                except Exception:
                    continue

    def _set(self, owner, attr: str, wire, orig) -> None:
        setattr(owner, attr, wire)
        self._undo.append((owner, attr, orig))

    def uninstall(self) -> None:
        """Put every original back (for the in-process check in a learner's own kernel)."""
        while self._undo:
            owner, attr, orig = self._undo.pop()
            try:
                setattr(owner, attr, orig)
            except Exception:
                pass

    def _wrap(self, orig, name: str):
        check = self._check
        if isinstance(orig, type):

            class Tripwired(orig):  # type: ignore[misc, valid-type]
                def __init__(self, *a, **k):
                    check(name)
                    super().__init__(*a, **k)

                def forward(self, *a, **k):
                    check(name)
                    return super().forward(*a, **k)

            Tripwired.__name__ = Tripwired.__qualname__ = orig.__name__
            return Tripwired

        def tripwire(*a, **k):
            check(name)
            return orig(*a, **k)

        return tripwire


def _block_processes() -> None:
    def blocked(*a, **k):
        raise PermissionError("starting or signalling processes is not allowed while grading")

    import posix

    for mod in (os, posix):
        for name in _PROCESS_CALLS:
            if hasattr(mod, name):
                setattr(mod, name, blocked)
    try:
        import _posixsubprocess

        _posixsubprocess.fork_exec = blocked
    except ImportError:
        pass


def _to_array(x, np, torch):
    """One output -> a plain NumPy array (exact types only: no subclasses, no objects, a dtype of
    the protocol's, native byte order). Anything exotic (a sparse, quantized, nested or meta
    tensor, float8, uint32, float128...) is ``WrongType``, never a crash of the unit."""
    if torch is not None and type(x) in (torch.Tensor, torch.nn.Parameter):
        try:
            special = x.layout != torch.strided or x.is_quantized or x.is_nested or x.is_meta
        except Exception:  # noqa: BLE001 - a tensor that cannot even say what it is
            special = True
        if special:
            raise WrongType("sparse or special tensor")
        if x.is_complex() or x.numel() > MAX_ELEMENTS:
            raise WrongType("complex tensor" if x.is_complex() else "too many elements")
        try:
            t = torch.Tensor.detach(x).cpu()
            if t.dtype == torch.bfloat16:
                t = t.float()
            a = np.array(t.numpy(), copy=True)
        except Exception:  # noqa: BLE001 - a dtype NumPy has no name for (float8, uint16...)
            raise WrongType("unusual dtype") from None
    elif type(x) is np.ndarray or isinstance(x, np.generic) or type(x) in (int, float, bool):
        a = np.array(x, copy=True)
        if a.dtype.kind not in "biuf" or a.size > MAX_ELEMENTS:
            raise WrongType("too many elements" if a.size > MAX_ELEMENTS else "object array")
    else:
        raise WrongType(return_kind(x))
    from mha_grader.sandbox.protocol import (
        DTYPES,  # (imports NumPy: not before the job's sys.path is set)
    )

    if a.dtype.name not in DTYPES:
        raise WrongType("unusual dtype")
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _outputs(out, np, torch) -> list:
    if type(out) in (tuple, list):
        if len(out) > 8:
            raise WrongType("too many outputs")
        return [_to_array(o, np, torch) for o in out]
    return [_to_array(out, np, torch)]


def _args(spec: list, arrays: dict, framework: str, np, torch) -> list:
    args = []
    for a in spec:
        if "array" in a:
            v = arrays[a["array"]].copy()
            args.append(torch.from_numpy(v) if framework == "torch" else v)
        elif "dtype" in a:
            args.append(
                getattr(torch, a["dtype"]) if framework == "torch" else np.dtype(a["dtype"])
            )
        else:
            args.append(a["value"])
    return args


def _run_item(item: dict, ns: dict, arrays: dict, wires: Tripwires, np, torch) -> tuple[dict, dict]:
    """Call one item on its cases; returns (status json, arrays to save). With ``substitutes``
    (a second run, ``mha_grader/substitute.py``): the learner's earlier functions named there
    are replaced in ``ns`` by the course's own for the call, and put back after."""
    swaps = item.get("substitutes") or {}
    before = {n: ns[n] for n in swaps if n in ns}
    try:
        for name, path in swaps.items():
            ns[name] = _resolve(path)  # from the staged course: present only in this run
        return _call_item(item, ns, arrays, wires, np, torch)
    finally:
        for name in swaps:
            if name in before:
                ns[name] = before[name]
            else:
                ns.pop(name, None)


def _call_item(
    item: dict, ns: dict, arrays: dict, wires: Tripwires, np, torch
) -> tuple[dict, dict]:
    fn = ns.get(item["function"])
    if fn is None:
        return {"status": "missing function"}, {}
    if item.get("static_forbidden"):
        return {"status": "forbidden API", "forbidden": list(item["static_forbidden"])}, {}
    driver = None
    if item.get("driver"):
        mod, _, name = item["driver"].partition(":")
        driver = getattr(importlib.import_module(mod), name)
    saved, shapes = {}, []
    wires.hits = set()
    for i, case in enumerate(item["cases"]):
        args = _args(case, arrays, item["framework"], np, torch)
        wires.armed = set(item["forbidden"])
        try:
            if item.get("service"):  # this case's object lives in the parent (channel.py)
                channel.client().call("begin", item=item["id"], case=i)
            out = driver(fn, *args) if driver else fn(*args)
        except ForbiddenCall as e:
            return {"status": "forbidden API", "forbidden": [str(e)]}, {}
        except NotImplementedError:
            return {"status": "not implemented"}, {}
        except MemoryError:
            return {"status": "memory limit"}, {}
        except SystemExit as e:
            return {"status": "error", **exception_report(e)}, {}
        except BaseException as e:
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            if "can't allocate memory" in tb or "not enough memory" in tb.lower():
                return {"status": "memory limit"}, {}
            return {"status": "error", **exception_report(e)}, {}
        finally:
            wires.armed = set()
            if item.get("service"):
                with contextlib.suppress(Exception):
                    channel.client().call("end")
        if wires.hits:
            return {"status": "forbidden API", "forbidden": sorted(wires.hits)}, {}
        try:
            outs = _outputs(out, np, torch)
        except WrongType as e:
            return {"status": "wrong type", "got": str(e)}, {}
        for j, a in enumerate(outs):
            saved[f"c{i}_o{j}"] = a
        shapes.append(len(outs))
    return {"status": "ok", "n_outputs": shapes}, saved


def _arm_cpu(seconds: float) -> None:
    """Soft RLIMIT_CPU = CPU used so far + ``seconds`` (SIGXCPU ends the stage); hard stays."""
    if resource is None or not seconds:
        return
    try:
        used = resource.getrusage(resource.RUSAGE_SELF)
        now = used.ru_utime + used.ru_stime
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        want = int(now + seconds) + 1
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))
    except (OSError, ValueError):
        pass


def _cap_memory(mb: int) -> bool:
    """Lower the HARD address-space limit to (now + ``mb`` MiB), before any submission code runs:
    an unprivileged process cannot raise a hard limit again, so the bound holds whatever the
    submission does. False if it cannot be applied (the caller then fails the items closed)."""
    if resource is None:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = vm + mb * 2**20
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        return resource.getrlimit(resource.RLIMIT_AS) == (cap, cap)
    except (OSError, ValueError, StopIteration):
        return False


def _use_course(path: str, base: list[str]) -> None:
    """Import ``mha_course`` from this notebook's staged copy from now on."""
    for name in [m for m in sys.modules if m == "mha_course" or m.startswith("mha_course.")]:
        del sys.modules[name]
    sys.path[:] = [path, *base]
    importlib.invalidate_caches()


def _run_unit(
    nb: dict, job: dict, arrays: dict, wires: Tripwires, mark, cpu: float, out_dir: str, np, torch
) -> None:
    """Run one unit (a notebook's cells, then the items that share its forbidden names)."""
    from mha_grader.sandbox import protocol

    _use_course(nb["course"], job["_base"])
    ns: dict = {"__name__": "__main__", "__builtins__": builtins}  # a fresh namespace
    cell_errors = []
    defs = nb.get("defs_only")  # run the decorated definitions only, checked (defs_only.py)
    cells = defs_only.extract_cells(nb["cells"], defs) if defs else nb["cells"]
    if not defs:
        _block_processes()  # before any learner code (a defs-only unit: after its checks)
    for mod in defs["setup"] if defs else ():
        importlib.import_module(mod)
    # Forbidden APIs fail in the cells too (no answers precomputed at top level); no penalty.
    wires.armed = {n for it in nb["items"] for n in it["forbidden"]}
    for cell in cells:
        mark(protocol.cell_stage(nb["name"], cell["index"]))
        _arm_cpu(cpu)
        try:
            exec(compile(cell["source"], f"<cell {cell['index']}>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - a broken cell must not stop the others
            cell_errors.append({"index": cell["index"], **exception_report(e)})
    wires.armed, wires.hits = set(), set()
    protocol.write_cells(out_dir, cell_errors)
    if defs:
        ns[defs_only.EXTRACTED] = [(f"<cell {c['index']}>", c["source"]) for c in cells]
    for k, item in enumerate(nb["items"]):
        mark(protocol.item_stage(item["id"]))
        _arm_cpu(cpu)
        # A defs-only item: compiled first, in its own stage (a refused kernel never runs); no
        # more processes once the last is checked (a kernel that ran before compiled: its body
        # calls nothing but the kernel language).
        refused = _check_def(item, defs, ns, arrays, np, torch) if defs else None
        if defs and k == len(nb["items"]) - 1:
            _block_processes()
        if refused is not None and not item.get("static_forbidden"):  # that names more
            protocol.write_result(out_dir, item["id"], refused, [])
            continue
        status, saved = _run_item(item, ns, arrays, wires, np, torch)
        outs = (
            [[saved[f"c{i}_o{j}"] for j in range(n)] for i, n in enumerate(status["n_outputs"])]
            if status["status"] == "ok"
            else []
        )
        protocol.write_result(out_dir, item["id"], status, outs)


def _check_def(item: dict, defs: dict, ns: dict, arrays: dict, np, torch) -> dict | None:
    """A defs-only item's check (``DefsOnly.check``) on all its cases' arguments: None if it
    passed (or there is no function: "missing function", as in any unit), "not implemented" for
    the untouched stub, else its "not compiled" status. A check that fails fails closed."""
    fn = ns.get(item["function"])
    if fn is None:
        return None
    if defs_only.unwritten(ns[defs_only.EXTRACTED], item["function"]):
        return {"status": "not implemented"}
    try:
        mod, _, name = (item.get("driver") or ":").partition(":")
        driver = getattr(importlib.import_module(mod), name) if mod else None
        cases = [_args(c, arrays, item["framework"], np, torch) for c in item["cases"]]
        check = defs_only.check(defs)
        verdict = check(fn, driver, cases, ns[defs_only.EXTRACTED], float(defs["wall_s"]))
    except Exception as e:  # noqa: BLE001 - the learner's definitions broke the check
        verdict = {"verdict": defs_only.REFUSED, **exception_report(e)}
    return None if verdict is None else {"status": "not compiled", **verdict}


def _unit_dirs(nb: dict, out_dir: str) -> tuple[str, str]:
    """The unit's own results folder (``out/<dir>``) and temp folder (``$HOME/<dir>``), new."""
    name = nb["dir"]
    if not (name.startswith("u") and name[1:].isdigit()):
        raise ValueError(f"unit folder: expected u<number>, got {name!r}")
    unit_out = os.path.join(out_dir, name)
    unit_tmp = os.path.join(os.environ.get("HOME") or "/tmp", name)
    for d in (unit_out, unit_tmp):
        os.mkdir(d, 0o700)
    return unit_out, unit_tmp


def _enter_unit(nb: dict, job: dict, unit_out: str, unit_tmp: str) -> None:
    """In the forked unit, before any learner code: its own temp folder, then (``job["confine"]``)
    its own namespaces and Landlock rules (``confine.py``): it reads only the runtime and ITS
    course, writes only its own folders."""
    import tempfile

    for var in ("HOME", "TMPDIR", "MPLCONFIGDIR"):
        os.environ[var] = unit_tmp
    tempfile.tempdir = None
    os.chdir(unit_tmp)
    if job.get("confine"):
        run = confine.interpreter_files() if nb.get("defs_only") else []  # its checks' process
        confine.confine_unit([*job["_base"], nb["course"]], [unit_out, unit_tmp], run)


def _unit_process(
    nb: dict,
    job: dict,
    arrays: dict,
    wires: Tripwires,
    mark,
    cpu: float,
    unit_out: str,
    unit_tmp: str,
    np,
    torch,
) -> None:
    """The forked unit's whole life; never returns."""
    from mha_grader.sandbox import protocol

    mark.owner[0] = os.getpid()  # this unit names its stages; a process its cells fork does not
    try:
        for other in job["notebooks"]:  # a unit reaches only its own grader channel
            if other is not nb and other.get("channel_fd") is not None:
                with contextlib.suppress(OSError):
                    os.close(other["channel_fd"])
        channel.connect(nb.get("channel_fd"))
        try:
            _enter_unit(nb, job, unit_out, unit_tmp)
        except confine.ConfineFailed:
            os._exit(CONFINE_FAILED)
        cap = min((int(it["memory_mb"]) for it in nb["items"] if it.get("memory_mb")), default=0)
        if cap and not _cap_memory(cap):  # the bound can't be enforced here: fail closed
            for item in nb["items"]:
                protocol.write_result(unit_out, item["id"], {"status": "memory limit"}, [])
            mark(protocol.unit_end_stage(nb["name"]))
            os._exit(0)
        _run_unit(nb, job, arrays, wires, mark, cpu, unit_out, np, torch)
        mark(protocol.unit_end_stage(nb["name"]))
    finally:
        os._exit(0)


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
    stream = job.get("progress_fd")  # the parent's clock reads THIS (launch._Stream), line by line
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
    if torch is not None:  # course functions are absent from the staged package; torch's are wired
        for name in sorted(
            {
                n
                for nb in job["notebooks"]
                for it in nb["items"]
                for n in it["forbidden"]
                if not n.startswith("mha_course.")
            }
        ):
            wires.install(name)
    cpu = float(job.get("item_cpu", 0))
    confined = bool(job.get("confine"))
    if confined:
        confine.become_subreaper()
        confine.warm_up(job["_base"], [out_dir])
    sealed: dict[str, str] = {}  # unit folder -> the unguessable name it has until the end
    meta = _metadata(out_dir)
    # What the zygote imported lives as long as it does: out of the collector's sight, so that a
    # unit's collections neither walk those objects nor write to (and so copy) their pages.
    gc.freeze()
    for nb in job["notebooks"]:
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
    _unseal(out_dir, sealed)
    mark(protocol.DONE)
    os._exit(0)  # no atexit handlers, no lingering threads

"""The sandboxed child: the ONLY place learner code runs (``python -I -m mha_grader.child``).

It reads the job (per notebook: cells to run and items to call; inputs as a non-pickle
``.npz``), deletes it,
puts tripwires on forbidden APIs and on process creation, runs the cells, calls each item's
function, and writes plain numeric arrays (``np.savez``, no pickle) and a small JSON status per
item into the results folder. Progress goes to ``progress`` so the parent can time each stage.
Nothing it prints matters: the parent discards stdout/stderr and compares numbers itself.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
import traceback

from mha_grader.feedback import exception_report, return_kind

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
_PROCESS_CALLS = ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv",
                  "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
                  "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
                  "kill", "killpg", "setsid", "setpgid")
MAX_ELEMENTS = 20_000_000


class ForbiddenCall(BaseException):
    """Raised by a tripwire (a BaseException, so ``except Exception`` does not swallow it)."""


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
    """One output -> a plain NumPy array (exact types only: no subclasses, no objects)."""
    if torch is not None and type(x) in (torch.Tensor, torch.nn.Parameter):
        t = torch.Tensor.detach(x).cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        if t.is_complex() or t.numel() > MAX_ELEMENTS:
            raise WrongType("complex tensor" if t.is_complex() else "too many elements")
        return np.array(t.numpy(), copy=True)
    if type(x) is np.ndarray or isinstance(x, np.generic) or type(x) in (int, float, bool):
        a = np.array(x, copy=True)
        if a.dtype.kind not in "biuf" or a.size > MAX_ELEMENTS:
            raise WrongType("too many elements" if a.size > MAX_ELEMENTS else "object array")
        return a
    raise WrongType(return_kind(x))


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
            args.append(getattr(torch, a["dtype"]) if framework == "torch" else np.dtype(a["dtype"]))
        else:
            args.append(a["value"])
    return args


def _run_item(item: dict, ns: dict, arrays: dict, wires: Tripwires, np, torch) -> tuple[dict, dict]:
    """Call one item on its cases; returns (status json, arrays to save)."""
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


def main() -> None:
    job_dir, out_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    import numpy as np
    with np.load(os.path.join(job_dir, "inputs.npz"), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    for name in ("job.json", "inputs.npz"):
        os.remove(os.path.join(job_dir, name))
    progress = os.open(os.path.join(out_dir, "progress"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    def mark(stage: str) -> None:
        os.pwrite(progress, (stage[:100].ljust(100) + "\n").encode(), 0)

    mark("setup")
    torch = None
    if job["needs_torch"]:
        import torch
        torch.set_num_threads(1)
    wires = Tripwires()
    for name in sorted({n for nb in job["notebooks"] for it in nb["items"] for n in it["forbidden"]}):
        wires.install(name)
    _block_processes()
    for nb in job["notebooks"]:
        ns: dict = {"__name__": "__main__", "__builtins__": builtins}  # one namespace per notebook
        cell_errors = []
        # Forbidden APIs fail in the cells too (no answers precomputed at top level); no penalty.
        wires.armed = {n for it in nb["items"] for n in it["forbidden"]}
        for cell in nb["cells"]:
            mark(f"cell {nb['name']} {cell['index']}")
            try:
                exec(compile(cell["source"], f"<cell {cell['index']}>", "exec"), ns)
            except BaseException as e:  # noqa: BLE001 - a broken cell must not stop the others
                cell_errors.append({"index": cell["index"], **exception_report(e)})
        wires.armed, wires.hits = set(), set()
        with open(os.path.join(out_dir, f"cells_{nb['name']}.json"), "w", encoding="utf-8") as f:
            json.dump(cell_errors, f)
        for item in nb["items"]:
            mark(f"item {item['id']}")
            status, saved = _run_item(item, ns, arrays, wires, np, torch)
            with open(os.path.join(out_dir, f"{item['id']}.npz"), "wb") as f:
                np.savez(f, **saved)
            with open(os.path.join(out_dir, f"{item['id']}.json"), "w", encoding="utf-8") as f:
                json.dump(status, f)
    mark("done")
    os._exit(0)  # no atexit handlers, no lingering threads


if __name__ == "__main__":
    main()

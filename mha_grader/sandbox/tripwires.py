"""The child's tripwires: the forbidden names that live outside the course (torch's), and the
calls that start or signal processes.

``Tripwires`` replaces each forbidden function or class everywhere it is bound (``ALIASES``: more
doors to the same room) and records a call made while it is armed; ``_block_processes`` makes the
process calls of ``os`` and ``posix`` raise, before any learner code of a unit (``unit.py``).
The zygote (``child.py``) imports this at start-up, before any confinement.
"""

from __future__ import annotations

import importlib
import os
import sys

from mha_grader.errors import ForbiddenCall

# The private fused ops are bound twice: as ``torch.ops.aten.<op>`` and, like every function of
# ``torch._C._VariableFunctions``, as ``torch.<op>`` (the math one returns the weights beside the
# output, ``_native_multi_head_attention`` them with need_weights=True).
_SDPA_OPS = (
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)
ALIASES = {  # more doors to the same forbidden room
    "torch.nn.functional.scaled_dot_product_attention": (
        "torch._C._nn.scaled_dot_product_attention",
        "torch.ops.aten.scaled_dot_product_attention",
        *(f"torch.ops.aten.{op}" for op in _SDPA_OPS),
        *(f"torch.{op}" for op in _SDPA_OPS),
    ),
    "torch.nn.MultiheadAttention": (
        "torch.nn.functional.multi_head_attention_forward",
        "torch._native_multi_head_attention",
    ),
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
    """Replace forbidden functions/classes everywhere they are bound; record armed calls.

    In a child that does not import torch (NumPy items), torch's names are wired when learner code
    first imports torch (``install_on_import``); before and after each item's call
    ``check_imports`` looks for an import that went around that hook: one ``import torch`` in a
    cell must not reach SDPA unwired."""

    def __init__(self) -> None:
        self.armed: set[str] = set()
        self.hits: set[str] = set()
        self._undo: list[tuple[object, str, object]] = []
        self.pending: list[str] = []  # names to wire once their module is imported
        self.bypassed: set[str] = set()  # ... whose module was imported around the hook
        self._hook: _WireOnImport | None = None  # the import hook, while names are pending

    def _check(self, name: str) -> None:
        if name in self.armed:
            self.hits.add(name)
            raise ForbiddenCall(name)

    def install(self, name: str) -> None:
        wires: dict[int, tuple[object, object]] = {}  # id(original) -> (original, its wire)
        for dotted in (name, *ALIASES.get(name, ())):
            try:
                orig = _resolve(dotted)
            except Exception:
                continue
            orig, wire = wires.setdefault(id(orig), (orig, self._wrap(orig, name)))
            owner, _, attr = dotted.rpartition(".")
            try:
                self._set(_resolve(owner), attr, wire, orig)
            except Exception:
                pass
        for mod in list(sys.modules.values()):  # one pass over every module for all the doors
            try:
                for k, v in list(vars(mod).items()):
                    if id(v) in wires and wires[id(v)][0] is v:
                        self._set(mod, k, wires[id(v)][1], v)
            except Exception:
                continue

    def install_on_import(self, names: list[str]) -> None:
        """Wire ``names`` (torch's) as soon as torch is imported, without importing it now."""
        self.pending = sorted(names)
        self.catch_up()  # those already imported (a preload) are wired now
        if self.pending:
            self._hook = _WireOnImport(self)
            sys.meta_path.insert(0, self._hook)

    def catch_up(self) -> list[str]:
        """Wire the pending names whose top-level module is imported by now; return them."""
        late = [n for n in self.pending if n.split(".")[0] in sys.modules]
        for name in late:
            self.pending.remove(name)
            self.install(name)
        return late

    def check_imports(self) -> None:
        """Before and after an item's calls: names whose module was imported around the import
        hook are wired now, too late for a reference the code kept, so they count as used
        (``bypassed``). So do all the pending names once the hook is off ``sys.meta_path`` (only
        learner code takes it off: torch imported then, and its modules dropped from
        ``sys.modules`` again, would leave no other trace)."""
        self.bypassed.update(self.catch_up())
        if self.pending and not any(f is self._hook for f in sys.meta_path):
            self.bypassed.update(self.pending)

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


class _WireOnImport:
    """A meta-path finder that, when a pending name's top-level package is first imported, lets
    the real loader run and then wires the pending names (``Tripwires.install_on_import``)."""

    def __init__(self, wires: Tripwires) -> None:
        self.wires = wires

    def find_spec(self, fullname: str, path=None, target=None):
        if "." in fullname or all(n.split(".")[0] != fullname for n in self.wires.pending):
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        real, wires = spec.loader, self.wires

        class Loader(type(real)):  # the real loader's class, so importlib treats it the same
            def exec_module(self, module) -> None:
                real.exec_module(module)
                wires.catch_up()

        spec.loader = Loader.__new__(Loader)
        spec.loader.__dict__.update(vars(real))
        return spec


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

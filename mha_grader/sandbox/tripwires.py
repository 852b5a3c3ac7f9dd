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

"""Let torch's optimizers run in the grading child without importing the compiler.

Every ``Optimizer.step`` of torch starts with ``import torch._dynamo`` and two calls to
``torch._dynamo.graph_break()``, and most other ``torch.optim`` methods are wrapped by
``torch._disable_dynamo``, which calls ``torch._dynamo.disable`` on first use. In eager code both
do nothing: ``graph_break``'s body is empty, and ``disable`` only marks a function "never
compile this". But the import loads torch's whole compiler stack (dynamo, inductor, sympy):
about 1.4 s of CPU here (torch 2.13, one core), paid by every student whose ex13 makes an
AdamW - a sixth of what grading one student's 18 notebooks costs.

So the zygote (``child.main``, before any unit and any learner code) puts a stand-in module
``LazyDynamo`` at ``torch._dynamo`` that answers exactly those two names with their eager
behaviour (``graph_break``: nothing; ``disable``: the function itself), and for ANY other name
imports the real ``torch._dynamo`` in its place and answers from it (dunder names excepted:
introspection sees the real package's spec, file and path, and submodules import as usual).
So ``torch.compile``, transformers (which loads it when imported), FlexAttention or a learner's
own ``torch._dynamo`` call get the real compiler, only later; what
differs is that the optimizer functions called before then keep their cached "disabled" mark
as the plain function (so a compiled function that calls them traces into them instead of
skipping them: slower to compile, the same result).

If torch stops using these two names, the stand-in forwards the first other name and the
import happens as before: slower, never wrong. ``tests/grading/test_eager.py`` checks that an
AdamW run imports nothing and matches, bit for bit, a run with the real module; that other
names, submodules, ``inspect`` and transformers' import work; and that FlexAttention runs.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable

NAME = "torch._dynamo"


def _graph_break(msg: str = "") -> None:
    """torch._dynamo.graph_break outside compilation: nothing (its body is empty)."""


def _disable(
    fn: Callable | None = None,
    recursive: bool = True,
    *,
    reason: str | None = None,
    wrapping: bool = True,
) -> Callable:
    """torch._dynamo.disable outside compilation: the function runs as it is."""
    return fn if fn is not None else (lambda f: f)


class LazyDynamo(types.ModuleType):
    """``torch._dynamo`` until something asks it for more than ``graph_break`` or ``disable``.

    It carries the real package's spec, file and path, so that introspection (``inspect``
    walking ``sys.modules``) finds what it expects without loading anything, and its submodules
    (``import torch._dynamo.config``) import as usual; the real ``__init__`` runs on the first
    other name asked for. (Loading it on a dunder lookup broke transformers' import: ``inspect``
    asked for ``__file__`` while ``torch.distributed`` was half imported.)"""

    def __init__(self, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(
            NAME, "stand-in for torch._dynamo in the grading child (mha_grader/sandbox/eager.py)"
        )
        self.__spec__, self.__loader__, self.__package__ = spec, spec.loader, NAME
        self.__file__ = spec.origin
        self.__path__ = list(spec.submodule_search_locations or [])
        self.graph_break = _graph_break
        self.disable = _disable

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):  # introspection: a module without it
            raise AttributeError(name)
        return getattr(load_real(), name)


def load_real() -> types.ModuleType:
    """Replace the stand-in by the real ``torch._dynamo`` (once) and return it."""
    torch = sys.modules["torch"]
    if isinstance(sys.modules.get(NAME), LazyDynamo):
        del sys.modules[NAME]
        torch.__dict__.pop("_dynamo", None)
    return importlib.import_module(NAME)


def defer_dynamo() -> bool:
    """Install the stand-in if torch is imported and its compiler is not; returns whether it did."""
    torch = sys.modules.get("torch")
    if torch is None or NAME in sys.modules:
        return False
    spec = importlib.util.find_spec(NAME)  # where it is; nothing of it runs
    if spec is None:
        return False
    sys.modules[NAME] = stand_in = LazyDynamo(spec)
    torch._dynamo = stand_in
    return True

"""Is the learner's kernel Triton? ex17's ``DefsOnly.check``, run in the sandbox's defs-only unit.

Under ``TRITON_INTERPRET=1`` a ``@triton.jit`` body is ordinary Python: it could walk up to the
interpreter's frames and write ``Out``/``LSE``/``DQ`` with torch (issue #30, route 3). Triton's
own compiler refuses such a body (a call to anything but the kernel language is "Unsupported
function referenced"), so before a kernel's values are graded this compiles it, for a GPU
(``GPUTarget("cuda", 90, 32)``: code generation only, no device needed), once per launch the
grader's driver would make (the same arguments and ``constexpr`` values, so the same branches).

It runs in a fresh process (Triton cannot compile where it was imported for its interpreter)
that execs exactly the definitions the unit runs (``mha_grader/sandbox/defs_only.py`` extracted
them; no cell ever ran there), inside the unit's sandbox and bounds, with a wall limit.

Run as a script (``python -I triton_compile.py``) it is that process: a job in JSON on stdin,
one verdict in JSON on stdout (``{}`` when every launch compiled).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_TARGET = ("cuda", 90, 32)  # an H100's target: Triton's NVIDIA backend, CPU-only code generation


def _encode(x):
    """A launch argument as JSON: a tensor by its dtype (only that and its alignment matter)."""
    if hasattr(x, "data_ptr") and hasattr(x, "dtype"):
        return {"tensor": str(x.dtype).removeprefix("torch.")}
    if x is None or isinstance(x, (bool, int, float)):
        return x
    raise TypeError(f"a launch argument must be a tensor or a number, got {type(x).__name__}")


def _launches(kernel, driver, cases: list[list]) -> list[dict]:
    """The launches ``driver`` makes for each case, recorded, not run (a stand-in kernel)."""
    from triton.runtime.jit import KernelInterface

    seen: list[dict] = []

    class Recorder(KernelInterface):
        fn = getattr(kernel, "fn", None)

        def run(self, *args, grid, warmup, **kwargs):
            seen.append(
                {
                    "args": [_encode(a) for a in args],
                    "kwargs": {k: _encode(v) for k, v in kwargs.items()},
                }
            )

    for args in cases:
        driver(Recorder(), *args)
    return seen


def check_compiles(
    kernel, driver, cases: list[list], extracted: list, wall_s: float
) -> dict | None:
    """``DefsOnly.check`` for ex17's kernels: None if every launch compiles, else the verdict
    (``{"verdict": "refused" | "unavailable" | "too long", "cell": i, "line": n}``).

    ``extracted``: the unit's program, ``[(file name, text)]``; ``cases``: each case's arguments
    as the driver gets them (``driver(kernel, *case)``)."""
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface) or not hasattr(kernel, "fn"):
        return None  # not a kernel at all: the driver refuses it (TypeError), as before
    job = {
        "cells": [list(c) for c in extracted],
        "kernel": kernel.fn.__name__,
        "launches": _launches(kernel, driver, cases),
        "target": list(_TARGET),
    }
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = os.path.join(os.environ.get("TMPDIR", "/tmp"), "triton-compile")
    try:
        done = subprocess.run(
            [sys.executable, "-I", str(Path(__file__).resolve()), *sys.path],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=wall_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "too long"}
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"verdict": "unavailable"}  # the compiler's process died: not graded, said so
    return verdict or None


# ---- the compile process (run as a script) ----------------------------------------------------


def _where(e: BaseException, cells: dict[str, int], fn_line: dict[str, int]) -> dict:
    """The cell and line of the refusal, from Triton's error or the traceback."""
    out: dict = {}
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in cells:
            out = {"cell": cells[name], "line": tb.tb_lineno}
        tb = tb.tb_next
    node = getattr(e, "node", None)
    if hasattr(node, "lineno") and getattr(e, "_cell", None) in cells:
        out = {"cell": cells[e._cell], "line": fn_line[e._cell] + node.lineno - 1}
    return out


def main() -> None:
    import builtins
    import linecache

    job = json.load(sys.stdin)
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        from triton.runtime.jit import JITFunction, create_function_from_signature

        target = GPUTarget(*job["target"])
        backend = make_backend(target)
    except Exception:  # noqa: BLE001 - no Triton, or no NVIDIA backend: not graded, said so
        print(json.dumps({"verdict": "unavailable"}))
        return
    cells = {name: int(name.strip("<>").split()[-1]) for name, _ in job["cells"]}
    ns: dict = {"__name__": "__kernels__", "__builtins__": builtins}
    try:
        for name, text in job["cells"]:  # only definitions, imports, constants
            linecache.cache[name] = (len(text), None, text.splitlines(True), name)
            exec(compile(text, name, "exec"), ns)
        kernel = ns[job["kernel"]]
        if not isinstance(kernel, JITFunction):
            raise TypeError("not a @triton.jit function here")
        # Triton parses the kernel from its ``def`` line: that line is its line 1
        skip = next(i for i, t in enumerate(kernel.raw_src) if t.lstrip().startswith("def "))
        fn_line = {kernel.fn.__code__.co_filename: kernel.starting_line_number + skip}
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        for launch in job["launches"]:
            args = [_decode(a) for a in launch["args"]]
            kwargs = {k: _decode(v) for k, v in launch["kwargs"].items()}
            _ttir(kernel, backend, target, binder, args, kwargs)
    except BaseException as e:  # noqa: BLE001 - the compiler refused it (or the program broke)
        print(json.dumps({"verdict": "refused", **_where(e, cells, locals().get("fn_line", {}))}))
        return
    print(json.dumps({}))


# The compile process does not import torch (1.5 s of CPU, most of this process's cost): Triton
# specializes a tensor argument on its dtype's name and its pointer's alignment only, so a
# stand-in with those two is the same launch (tests/grading/test_defs_only.py compares them).
_POINTEE = frozenset(
    {"bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"}
    | {"float16", "bfloat16", "float32", "float64"}
    | {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}
)


class _Dtype:
    """A torch dtype as Triton reads it, by name (``str``: ``torch.float32``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


_DTYPES: dict[str, _Dtype] = {}  # one object per name: Triton caches what it read by the object


class _Buffer:
    """A launch's tensor argument as Triton's compiler sees it: a dtype and a 16-byte-aligned
    address (as the driver's tensors have)."""

    def __init__(self, dtype: str) -> None:
        if dtype not in _POINTEE:
            raise TypeError(f"a kernel argument's dtype: expected one of Triton's, got {dtype!r}")
        self.dtype = _DTYPES.setdefault(dtype, _Dtype(dtype))

    @staticmethod
    def data_ptr() -> int:
        return 16


def _ttir(kernel, backend, target, binder, args: list, kwargs: dict):
    """One launch of ``kernel`` compiled to Triton's IR (what the compiler refuses raises);
    ``binder``: the kernel's ``create_function_from_signature``."""
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource

    bound, spec, opts = binder(*args, **kwargs)
    options, sig, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, spec, opts)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    try:
        module = ASTSource(kernel, sig, constexprs, attrs).make_ir(
            target,
            options,
            backend.get_codegen_implementation(options),
            backend.get_module_map(),
            context,
        )
    except Exception as e:
        e._cell = kernel.fn.__code__.co_filename
        raise
    stages: dict = {}
    backend.add_stages(stages, options, ASTSource(kernel, sig).language)
    return stages["ttir"](module, {})


def _decode(x):
    return _Buffer(x["tensor"]) if isinstance(x, dict) else x


if __name__ == "__main__":
    sys.path[:0] = sys.argv[1:]  # the unit's own path (its staged course, the runtime)
    main()

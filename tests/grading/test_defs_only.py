"""Defs-only units (issue #30, route 3): what the static extraction keeps of a cell, how a refusal
is worded and carried, and ex17's compile check on the course's kernels and on kernels that are
Python (see ``mha_grader/sandbox/defs_only.py``, ``mha_course/grading/child/triton_compile.py``).
The gallery's ``ex17_kernel_fills_out_from_*`` cases run the same through the whole grader."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys

import pytest
from grading_helpers import ROOT, SOLUTIONS

from mha_grader.feedback import render_child
from mha_grader.sandbox import defs_only, protocol
from mha_grader.sandbox.defs_only import extract

DECORATORS, MODULES = ("triton.jit",), ("triton",)
_KERNEL = "@triton.jit\ndef k(X, N: tl.constexpr = 4):\n    pass\n"

# (name, cell source, the source lines kept, in order)
EXTRACTION = [
    ("imports of triton kept", "import triton\nimport triton.language as tl\n", [1, 2]),
    ("other imports dropped", "import sys\nimport torch\nfrom os import system\n", []),
    ("aliases resolved", "from triton import jit\n@jit\ndef k(X):\n    pass\n", [1, 2, 3, 4]),
    ("a kernel kept whole", _KERNEL, [1, 2, 3]),
    ("constants kept", "A = 3\nB: tl.constexpr = 4\nC = tl.constexpr(-2.5)\n", [1, 2, 3]),
    ("computed constants dropped", "A = f()\nB = tl.constexpr(g())\nC = [1]\n", []),
    ("other decorators dropped", "@torch.jit\ndef k(X):\n    pass\n", []),
    ("two decorators dropped", "@triton.jit\n@other\ndef k(X):\n    pass\n", []),
    ("a called decorator dropped", "@triton.jit(debug=True)\ndef k(X):\n    pass\n", []),
    ("a default that runs code", "@triton.jit\ndef k(X=print('hi')):\n    pass\n", []),
    ("an annotation that runs code", "@triton.jit\ndef k(X: f()):\n    pass\n", []),
    ("a plain function dropped", "def helper(x):\n    return x\n", []),
    ("a class dropped", "class K:\n    pass\n", []),
    ("attribute assignment dropped", "import triton\ntriton.jit = print\n", [1]),
    ("a statement on a kept line", "A = 1; print('x')\n" + _KERNEL, [2, 3, 4]),
    # a body is not run by defining it: the compiler judges it (``print`` is not Triton's)
    ("a body is the compiler's", _KERNEL.rstrip("\n") + "; print('x')\n", [1, 2, 3]),
    ("does not parse", "def (:\n", []),
]


@pytest.mark.parametrize(
    "source, kept", [c[1:] for c in EXTRACTION], ids=[c[0] for c in EXTRACTION]
)
def test_extraction_keeps_only_definitions_constants_and_triton_imports(source, kept):
    text = extract(source, DECORATORS, MODULES)
    lines = source.splitlines()
    want = [i + 1 for i, line in enumerate(lines) if i + 1 in kept]
    got = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip()]
    assert got == want
    assert all(text.splitlines()[n - 1] == lines[n - 1] for n in got)  # same lines, same places


def test_a_refusal_is_worded_by_its_verdict_and_placed():
    where = {"cell": 12, "line": 8}
    refused = render_child(
        "not compiled", {"verdict": "refused", **where}, function="k", forbidden=()
    )
    assert refused.startswith("does not compile at line 8 of cell 12:")
    for verdict, words in (("unavailable", "not available"), ("too long", "time limit")):
        msg = render_child("not compiled", {"verdict": verdict}, function="k", forbidden=())
        assert words in msg


@pytest.mark.parametrize("verdict, ok", [("refused", True), ("too long", True), ("mine", False)])
def test_the_protocol_carries_a_known_verdict_only(verdict, ok):
    raw = json.dumps({"status": "not compiled", "verdict": verdict}).encode()
    if ok:
        assert protocol.parse_status(raw)["verdict"] == verdict
    else:
        with pytest.raises(protocol.Invalid):
            protocol.parse_status(raw)


# ---- ex17's compile check (needs Triton: an optional extra) ----------------------------------

triton = pytest.importorskip("triton")


def _program(source: str) -> tuple[dict, list]:
    """``source`` run as a defs-only unit runs it (interpreter mode, as the sandbox sets)."""
    import mha_course.kernels.triton_setup  # noqa: F401 - TRITON_INTERPRET before the kernels

    cells = [("<cell 5>", source)]
    ns: dict = {"__builtins__": builtins}
    exec(compile(source, "<cell 5>", "exec"), ns)
    return ns, cells


def _solution_cell(function: str) -> str:
    nb = json.loads((SOLUTIONS / "ex17_flash_attention_triton.ipynb").read_text())
    src = next(
        "".join(c["source"]) for c in nb["cells"] if f"def {function}(" in "".join(c["source"])
    )
    return extract(src, DECORATORS, MODULES)


def _forward_case():
    import torch

    q, k = torch.randn(1, 2, 21, 16), torch.randn(1, 1, 27, 16)
    return [q, k, k.clone(), True, 16, 16]


def _check(source: str):
    from mha_course.grading.child import drivers
    from mha_course.grading.child.triton_compile import check_compiles

    ns, cells = _program(source)
    kernel = ns["flash_fwd_kernel"]
    return check_compiles(kernel, drivers.drive_forward_kernel, [_forward_case()], cells, 120)


def test_the_course_kernel_compiles():
    assert _check(_solution_cell("flash_fwd_kernel")) is None


def test_a_python_call_in_a_kernel_body_is_refused_where_it_is():
    # Even with ``sys`` defined (extraction never keeps ``import sys``), Triton refuses the call.
    src = _solution_cell("flash_fwd_kernel").replace(
        "import triton\n", "import sys\nimport triton\n", 1
    )
    lines = src.split("\n")
    body = next(i for i, line in enumerate(lines) if "start_m = " in line)
    lines.insert(body, "    f = sys._getframe()")
    verdict = _check("\n".join(lines))
    assert verdict == {"verdict": "refused", "cell": 5, "line": body + 1}


def test_no_compiler_is_said_not_passed(monkeypatch):
    from mha_course.grading.child import triton_compile

    monkeypatch.setattr(triton_compile, "_TARGET", ("no-such-backend", 0, 0))
    assert _check(_solution_cell("flash_fwd_kernel")) == {"verdict": "unavailable"}


def test_a_compile_past_its_wall_limit_is_said(monkeypatch):
    from mha_course.grading.child import drivers
    from mha_course.grading.child.triton_compile import check_compiles

    ns, cells = _program(_solution_cell("flash_fwd_kernel"))
    case = _forward_case()
    verdict = check_compiles(
        ns["flash_fwd_kernel"], drivers.drive_forward_kernel, [case], cells, 0.01
    )
    assert verdict == {"verdict": "too long"}


# Compiles each launch (recorded by the grader's drivers on the graded cases) twice, in a process
# without the interpreter: with torch's tensors (what the compile process used to build) and with
# the stand-ins it builds now without importing torch; prints how many launches matched.
_SAME_IR = r"""
import builtins, json, linecache, sys
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from triton.runtime.jit import create_function_from_signature
from mha_course.grading.child import triton_compile as tc

job = json.load(sys.stdin)
ns = {"__builtins__": builtins}
for name, src in job["cells"]:
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), ns)
target = GPUTarget(*tc._TARGET)
backend = make_backend(target)
old = lambda x: torch.empty(16, dtype=getattr(torch, x["tensor"])) if isinstance(x, dict) else x
same = 0
for name, launches in job["launches"].items():
    kernel = ns[name]
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    for launch in launches:
        ir = [
            str(tc._ttir(kernel, backend, target, binder, [decode(a) for a in launch["args"]],
                         {k: decode(v) for k, v in launch["kwargs"].items()}))
            for decode in (old, tc._decode)
        ]
        assert ir[0] == ir[1], (name, launch)
        same += 1
print(same)
"""


def test_the_compile_without_torch_is_the_same_launch():
    """Triton's IR for each graded launch of the course's two kernels is the same whether the
    compile process passes torch's tensors or its torch-free stand-ins."""
    pytest.importorskip("triton")
    import numpy as np
    import torch

    from mha_course.grading.child import drivers
    from mha_course.grading.child.triton_compile import _launches
    from mha_course.grading.oracles import triton_dq_kernel, triton_forward

    source = _solution_cell("flash_fwd_kernel") + _solution_cell("flash_dq_kernel")
    ns, cells = _program(source)
    launches = {}
    for name, driver, oracle in [
        ("flash_fwd_kernel", drivers.drive_forward_kernel, triton_forward),
        ("flash_dq_kernel", drivers.drive_dq_kernel, triton_dq_kernel),
    ]:
        cases = [
            [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in c.values()]
            for c in oracle.make_cases(np.random.default_rng(0))
        ]
        launches[name] = _launches(ns[name], driver, cases)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _SAME_IR],
        input=json.dumps({"cells": cells, "launches": launches}),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == sum(map(len, launches.values())) >= 8


def test_a_dtype_triton_has_no_pointer_for_is_refused():
    from mha_course.grading.child.triton_compile import _decode

    assert _decode({"tensor": "float32"}).dtype is _decode({"tensor": "float32"}).dtype
    assert str(_decode({"tensor": "bfloat16"}).dtype) == "torch.bfloat16"
    with pytest.raises(TypeError, match="complex64"):
        _decode({"tensor": "complex64"})


@pytest.mark.parametrize(
    ("body", "unwritten"),
    [
        ("    '''doc'''\n    raise NotImplementedError('task 4 is not written yet')\n", True),
        ("    raise NotImplementedError\n", True),
        ("    '''doc'''\n    x = 1\n    raise NotImplementedError('half done')\n", False),
        ("    raise ValueError('no')\n", False),
        ("    pid = tl.program_id(0)\n", False),
    ],
)
def test_the_untouched_stub_is_not_implemented_not_refused(body, unwritten):
    """The handed-out kernel is only ``raise NotImplementedError``, which Triton refuses to
    compile: it is reported as any unit reports a stub; a kernel with any work in it is compiled."""
    cells = [("<cell 3>", "@triton.jit\ndef k(X):\n" + body)]
    assert defs_only.unwritten(cells, "k") is unwritten
    assert defs_only.unwritten(cells, "other") is False
